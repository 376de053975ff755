"""Named run sizes (suites/profiles.py): every profile of a campaign names the same settings, and the campaigns take
their sizes from there."""

from __future__ import annotations

from suites.profiles import PROFILES, settings


def test_every_profile_of_a_campaign_sets_the_same_sizes():
    for campaign, profiles in PROFILES.items():
        assert "full" in profiles and "quick" in profiles, campaign
        keys = [set(v) for v in profiles.values() if v]
        assert all(k == keys[0] for k in keys), campaign


def test_the_zoo_and_the_demo_take_their_sizes_from_the_profiles():
    from suites.campaigns._commands import CampaignConfig
    from suites.campaigns.demo import demo_generation_config

    quick = CampaignConfig.quick()
    assert quick.profile == "quick" and all(getattr(quick, k) == v for k, v in settings("zoo", "quick").items())
    assert CampaignConfig.of_profile("full") == CampaignConfig()
    assert demo_generation_config("toy", quick=True).samples == settings("demo", "quick")["toy_generation_samples"]
    assert demo_generation_config("toy").samples is None  # full: the check's own plan
