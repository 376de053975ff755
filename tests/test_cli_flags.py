"""One config mechanism: every command-line flag of `specdec` and of every campaign is declared by a config
dataclass field (harness.configs.option), never by an argparse call of its own."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from harness.cli import build_parser, campaign_names
from harness.configs import Parser, add_arguments, option, undeclared_flags
from harness.runner import campaign_parser


def test_every_flag_of_specdec_is_declared_by_a_config_field():
    assert undeclared_flags(build_parser()) == []


@pytest.mark.parametrize("name", campaign_names())
def test_every_flag_of_every_campaign_is_declared_by_a_config_field(name):
    assert undeclared_flags(campaign_parser(name)) == []


@dataclasses.dataclass
class _Planted:
    seeds: int = option(3, "--seeds", "seeds", int, "N")


def test_a_flag_declared_by_hand_is_found_in_a_subcommand():
    """The planted violation: one flag added by its own add_argument call, beside one built from a field."""
    parser = Parser(prog="specdec")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("run")
    add_arguments(p, _Planted)
    p.add_argument("--rows", type=int)  # written by hand: not a config field
    assert undeclared_flags(parser) == ["specdec run --rows"]
    assert p._option_string_actions["--seeds"].config_field == "_Planted.seeds"


def test_help_and_version_are_argparse_own_and_positionals_are_not_flags():
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--version", action="version", version="1")
    parser.add_argument("name")
    assert undeclared_flags(parser) == []


def test_a_command_line_without_flags_builds_the_configs_own_defaults():
    """Defaults live once: a flag declared by one config (CheckConfig's --samples, default None) never restates
    another config's default (EngineConfig's 2,000 samples, 120 s timeout), and the zoo's CLI gives CampaignConfig()."""
    from harness.configs import from_args
    from harness.served.cli import engine_config
    from harness.served.config import EngineConfig
    from suites.campaigns._commands import CampaignConfig, ZooConfig

    parser = build_parser()
    built = engine_config(parser.parse_args(["verify", "--level", "engine", "--endpoint", "http://127.0.0.1:9/v1"]))
    assert dataclasses.asdict(built) == dataclasses.asdict(EngineConfig(endpoint="http://127.0.0.1:9/v1"))
    assert from_args(ZooConfig, parser.parse_args(["mutants"])).plan() == CampaignConfig()
