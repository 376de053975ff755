"""Sampling parameters at the generation level: the reference honours min_p / logit_bias / penalties / bad words /
min_new_tokens inside every block (exactly, by enumeration), the battery moves the toy laws, the
parameter mutants are far from the target law, old adapters run with the settings they support,
bad settings exit 2, and a top-p-before-temperature loop is reported as a convention."""

import dataclasses
import json

import pytest
import torch

from harness.check.exact_laws import continuation_law, total_variation
from harness.check.generation import run_generation_check
from harness.check.settings import Setting, parse_setting
from harness.cli import main
from harness.errors import HarnessError
from harness.models.toy_pairs import toy_models, toy_prompts
from harness.mutants import get
from harness.mutants.generation import exact_output_law, hooked_generate
from harness.pairs import get_pair
from specdec_ref.adapters import generate as reference_generate
from specdec_ref.generate import REFERENCE_HOOKS, StepHooks, default_eos, eos_set, target_law
from specdec_ref.sampling import sample_from_uniform
from suites.catalogues.generation import PARAMETER_SETTINGS

PROMPT = toy_prompts()[0]
NEW_MUTANTS = ("min_p_first_position_only", "logit_bias_draft_only", "penalties_from_prefix_before_block",
               "penalty_draft_only", "min_new_tokens_bonus_only", "bad_words_bonus_only", "top_p_before_temperature")
KINDS = {"toy": "0.7", "toy-eos": "eos"}


def _models(pair: str):
    target, draft = toy_models(KINDS[pair], torch.float64)
    return target, draft, eos_set(default_eos(target))


def _pair_for(setting: Setting) -> str:
    return "toy-eos" if setting.min_new_tokens else "toy"  # min_new_tokens needs an EOS


@pytest.mark.parametrize("setting", PARAMETER_SETTINGS, ids=lambda s: s.label)
def test_reference_output_law_is_the_target_law_under_every_setting(setting):
    """Exact: the reference's hooks (p at position i with the block's first i drafts) give the target law."""
    target, draft, eos = _models(_pair_for(setting))
    spec = exact_output_law(target, draft, PROMPT, 3, 3, setting, REFERENCE_HOOKS, eos)
    assert total_variation(spec, continuation_law(target, PROMPT, 3, setting, 16, eos)) < 1e-9


@pytest.mark.parametrize("setting", PARAMETER_SETTINGS, ids=lambda s: s.label)
def test_each_battery_setting_visibly_changes_the_toy_law(setting):
    target, _, eos = _models(_pair_for(setting))
    plain = Setting(setting.temperature, setting.top_k, setting.top_p)
    tvs = [total_variation(continuation_law(target, p, 3, setting, 16, eos), continuation_law(target, p, 3, plain, 16,
                                                                                              eos))
           for p in toy_prompts()[:2]]
    assert max(tvs) > 0.1, tvs


def test_the_loop_hands_position_i_the_prefix_with_the_blocks_first_i_drafts():
    histories, drafted = [], []

    def spy_target(logits, params, history):
        histories.append(history)
        return target_law(logits, params, history)

    def spy_draft(q, u):
        x = sample_from_uniform(q, u)
        drafted.append(x.clone())
        return x

    target, draft, _ = _models("toy")
    out = hooked_generate(target, draft, torch.tensor([PROMPT] * 3), max_new_tokens=7, gamma=3, temperature=1.0,
                          top_k=None, top_p=None, seed=1, hooks=StepHooks(target_probs=spy_target,
                                                                         draft_token=spy_draft),
                          repetition_penalty=2.0)
    first = histories[0]  # block 1: 3 drafts after the prompt, target positions 0..3
    drafts = torch.stack(drafted[:3], 1)  # [3 rows, 3]
    assert first.n_generated.tolist() == [[0, 1, 2, 3]] * 3
    for i in range(4):
        assert first.seq[:, i, first.seq.shape[-1] - i - 4:].tolist() == [PROMPT + d[:i] for d in drafts.tolist()]
    second = histories[1]  # block 2 starts after what block 1 emitted
    emitted = [[t for t in row if t >= 0] for row in out.tokens.tolist()]
    for b, row in enumerate(emitted):
        k = int(second.n_generated[b, 0])
        assert second.seq[b, 0, -(4 + k):].tolist() == PROMPT + row[:k]


@pytest.mark.parametrize("name", NEW_MUTANTS)
@pytest.mark.end_to_end
def test_parameter_mutants_are_far_from_the_target_law(name):
    impl = get(name)
    target, draft, eos = _models(impl.pair)
    (setting,) = impl.fn.settings
    tvs = [total_variation(exact_output_law(target, draft, p, 3, 3, setting, impl.fn.hooks, eos),
                           continuation_law(target, p, 3, setting, 16, eos)) for p in toy_prompts()[:2]]
    assert min(tvs) > 0.08, tvs  # each above the campaign's resolution on both prompts (see results/findings)


def _old_adapter(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    """The pre-issue-13 contract: no optional parameters."""
    return reference_generate(target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                              temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)


def test_an_adapter_without_the_new_parameters_runs_and_the_report_lists_skipped_settings():
    settings = (Setting(0.7, top_p=0.9),) + PARAMETER_SETTINGS[:2]
    report = run_generation_check(_old_adapter, get_pair("toy"), samples=1000, prompts=1, settings=settings)
    assert report.verdict == "pass"
    (skipped,) = [c for c in report.cases if c["name"] == "skipped_settings"]
    assert [s["not_accepted"] for s in skipped["settings"]] == [["min_p"], ["logit_bias"]]
    assert any("skipped settings" in n and "min_p=0.2" in n for n in report.notes)
    assert [c["name"] for c in report.cases if "samples" in c] == ["T=0.7,top_p=0.9/prompt0"]


@pytest.mark.parametrize("setting, needle", [
    ("T=1,min_p=1.5", "min_p"), ("T=1,logit_bias=16:+1", "logit_bias keys"), ("T=1,logit_bias=-1:+1", "logit_bias"),
    ("T=1,logit_bias=3:inf", "logit_bias values"), ("T=1,repetition_penalty=0", "repetition_penalty"),
    ("T=1,repetition_penalty=-2", "repetition_penalty"), ("T=1,min_p=x", "cannot be read"),
    ("T=0,min_p=0.1", "temperature > 0"),
])
def test_bad_settings_exit_2_with_one_line(setting, needle, capsys):
    code = main(["verify", "--level", "generation", "--impl", "specdec_ref.adapters:generate", "--pair", "toy",
                 "--setting", setting, "--samples", "10"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and "\n" not in err and "Traceback" not in err


def test_parse_setting_round_trips_the_label():
    for s in PARAMETER_SETTINGS:
        assert parse_setting(s.label.replace("T=", "temperature=")) == (s,) or parse_setting(s.label) == (s,)
    with pytest.raises(HarnessError):
        parse_setting("T=1,unknown=3")


@pytest.mark.slow
def test_top_p_before_temperature_is_reported_as_a_convention_and_passes_when_declared(tmp_path, capsys):
    """Exit 1 under the documented order, with the convention named in the final FAIL line, the JSON
    failure_summary and the notes; exit 0 when declared, and the PASS says under which order."""
    impl = "harness.mutants.generation:top_p_before_temperature"
    args = ["verify", "--level", "generation", "--impl", impl, "--pair", "toy", "--setting", "T=0.7,top_p=0.9",
            "--samples", "6000", "--seed", "3", "--contexts", "none"]
    assert main(args + ["--json", str(tmp_path / "a.json")]) == 1
    report = json.loads((tmp_path / "a.json").read_text())["report"]
    notes = " ".join(report.get("notes", []))
    assert "consistent with the target under convention 'top_p_before_temperature'" in notes
    advice = "consistent with the target under top_p_before_temperature: declare it with --processing-order"
    assert any(advice in line for line in report["failure_summary"]), report["failure_summary"]
    assert report["consistent_conventions"] == ["top_p_before_temperature"]
    assert report["processing_order"] == "standard"
    fail = [line for line in capsys.readouterr().err.splitlines() if line.startswith("specdec: FAIL")]
    assert len(fail) == 1 and advice in fail[0], fail
    assert main(args + ["--processing-order", "top_p_before_temperature", "--json", str(tmp_path / "b.json")]) == 0
    passed = json.loads((tmp_path / "b.json").read_text())["report"]
    assert passed["verdict"] == "pass" and passed["processing_order"] == "top_p_before_temperature"
    assert "verdict: PASS under --processing-order top_p_before_temperature" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW_MUTANTS)
def test_parameter_mutants_fail_the_generation_check(name):
    impl = get(name)
    report = run_generation_check(impl.fn, get_pair(impl.pair), samples=4000, settings=impl.fn.settings, seed=11,
                                  stop_on_fail=True)
    assert report.verdict == "fail"


@pytest.mark.slow
def test_reference_passes_the_battery():
    for pair in ("toy", "toy-eos"):
        settings = tuple(s for s in PARAMETER_SETTINGS if _pair_for(s) == pair)
        report = run_generation_check(reference_generate, get_pair(pair), samples=4000, settings=settings, seed=5)
        assert report.verdict == "pass", [t.name for t in report.tests if t.reject]
        assert len([c for c in report.cases if "samples" in c]) == 2 * len(settings)


def test_settings_are_plain_data():
    s = PARAMETER_SETTINGS[-1]
    assert dataclasses.asdict(s)["logit_bias"] == ((5, 1.0),)
    assert s.extras()["logit_bias"] == {5: 1.0}


def _draw(law: dict, n: int, seed: int) -> torch.Tensor:
    """n continuations drawn from an exact law, as a [n, L] -1 padded token tensor."""
    keys = list(law)
    idx = torch.multinomial(torch.tensor([law[k] for k in keys]), n, replacement=True,
                            generator=torch.Generator().manual_seed(seed))
    width = max(len(k) for k in keys)
    return torch.tensor([list(keys[i]) + [-1] * (width - len(keys[i])) for i in idx.tolist()])


def test_convention_diagnosis_names_the_order_that_fits_and_no_other():
    from harness.check.conventions import consistent_conventions

    target, _, eos = _models("toy")
    setting = Setting(0.7, top_p=0.9)
    args = dict(vocab=16, eos=eos, declared="standard", rate=1e-4, power=0.99, enumerate_law=True, seed=0)
    swapped = _draw(continuation_law(target, PROMPT, 3, setting, 16, eos, "top_p_before_temperature"), 2000, 1)
    assert consistent_conventions(swapped, target, PROMPT, 3, setting, **args) == ["top_p_before_temperature"]
    raw = _draw(continuation_law(target, PROMPT, 3, Setting(1.0), 16, eos), 2000, 2)  # a bug, not a convention
    assert consistent_conventions(raw, target, PROMPT, 3, setting, **args) == []


def test_a_no_op_parameter_is_named_and_never_counted_as_covered():
    """min_new_tokens on a pair without EOS and a zero logit bias (statically), a presence penalty on
    one-token continuations (no repeat possible: measured on the scored contexts) are no-ops: named in the
    notes and the JSON coverage, never in `covered`; a parameter that acts is covered."""
    pair = get_pair("toy")
    settings = (Setting(1.0, min_new_tokens=2), Setting(1.0, logit_bias=((3, 0.0),)),
                Setting(1.0, presence_penalty=2.0, logit_bias=((2, 1.5),)))
    report = run_generation_check(reference_generate, pair, samples=300, settings=settings, length=1, prompts=1,
                                  seed=1)
    coverage = report.to_dict()["coverage"]
    named = {(item["setting"], item["parameter"]) for item in coverage["no_op"]}
    assert named == {(settings[0].label, "min_new_tokens"), (settings[1].label, "logit_bias"),
                     (settings[2].label, "presence_penalty")}, coverage
    assert coverage["covered"] == ["logit_bias"]  # from the third setting only
    per = {s["setting"]: s for s in coverage["settings"]}
    assert per[settings[1].label]["covered"] == [] and per[settings[0].label]["covered"] == []
    assert per[settings[2].label]["covered"] == ["logit_bias"]
    notes = " ".join(report.notes)
    assert "no-op: min_new_tokens" in notes and "no EOS" in notes and "no-op: presence_penalty" in notes
    # the same penalty acts once a repeat is possible (3 new tokens): covered, not a no-op
    again = run_generation_check(reference_generate, pair, samples=300, settings=settings[2:], length=3, prompts=1,
                                 seed=1)
    assert again.coverage["covered"] == ["logit_bias", "presence_penalty"] and again.coverage["no_op"] == []


@pytest.mark.stochastic(false_alarm=0.001, seed=0)  # exit 0 or 3: no false FAIL 0.001
def test_battery_on_toy_names_every_no_op_parameter(capsys):
    """`--setting battery --pair toy`: min_new_tokens (no EOS on toy) is named, with the pair that fixes it."""
    assert main(["verify", "--level", "generation", "--impl", "specdec_ref.adapters:generate", "--pair", "toy",
                 "--setting", "battery", "--samples", "200", "--threads", "1", "--contexts", "none"]) in (0, 3)
    out = capsys.readouterr().out
    assert "no-op: min_new_tokens in setting T=1,min_new_tokens=2" in out and "--pair toy-eos" in out
    assert out.count("no-op:") == 1, out
