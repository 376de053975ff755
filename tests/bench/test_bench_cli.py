"""`specdec bench` flags (built from BenchConfig), bad input, suites and the planner."""

import argparse
import shlex

import pytest
import torch

from harness.bench import cli
from harness.bench.config import BenchConfig, command_line, parse_int_list
from harness.bench.plan import make_plan, suite_specs
from harness.errors import HarnessError


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_flag_defaults_are_the_dataclass_defaults():
    assert cli.config_from_args(_parse([])) == BenchConfig()


def test_contract_flags_parse_into_the_config():
    args = _parse(["--pair", "toy", "--gamma", "1..3,6", "--temperature", "0,0.7", "--repeats", "5",
                   "--out", "x", "--synthetic-cost", "40,4", "--top-k", "20", "--top-p", "0.9", "--compare-hf"])
    config = cli.config_from_args(args)
    assert config.pairs == ("toy",) and config.gammas == (1, 2, 3, 6) and config.temperatures == (0.0, 0.7)
    assert config.repeats == 5 and config.out == "x" and config.synthetic_cost_ms == (40.0, 4.0)
    assert config.top_k == 20 and config.top_p == 0.9 and config.compare_hf


def test_command_line_reproduces_the_config():
    config = BenchConfig(pairs=("toy", "toy-high"), gammas=(1, 4), temperatures=(1.0,), quick=True, resume=False,
                         synthetic_cost_ms=(40.0, 4.0))
    words = shlex.split(command_line(config))
    assert words[:2] == ["specdec", "bench"]
    assert cli.config_from_args(_parse(words[2:])) == config


@pytest.mark.parametrize("config,needle", [
    (BenchConfig(gammas=(0, 1)), "--gamma values must be integers >= 1"),
    (BenchConfig(temperatures=(-1.0,)), "--temperature"),
    (BenchConfig(top_p=0.0), "--top-p"),
    (BenchConfig(repeats=0), "--repeats must be >= 1"),
    (BenchConfig(synthetic_cost_ms=(-1.0, 1.0)), "--synthetic-cost"),
    (BenchConfig(target="a"), "--target and --draft go together"),
    (BenchConfig(pairs=("toy",), target="a", draft="b"), "either --pair or --target"),
])
def test_bad_config_raises_harness_error_naming_the_flag(config, needle):
    with pytest.raises(HarnessError, match=needle):
        make_plan(config)


def test_unknown_pair_suggests_the_close_name():
    with pytest.raises(HarnessError, match=r"unknown pair 'toy-hihg'\. Did you mean 'toy-high'"):
        make_plan(BenchConfig(pairs=("toy-hihg",)))


def test_unknown_suite_suggests_the_close_name():
    with pytest.raises(HarnessError, match=r"unknown suite 'quik'\. Did you mean 'quick'"):
        make_plan(BenchConfig(suite="quik"))


def test_malformed_lists_are_usage_errors():
    with pytest.raises(HarnessError, match="list of integers"):
        parse_int_list("1,x")
    with pytest.raises(SystemExit) as exc:  # argparse: exit code 2 with the message
        _parse(["--gamma", "one"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        _parse(["--synthetic-cost", "40"])


def test_gamma_zero_from_the_command_line_is_a_harness_error():
    with pytest.raises(HarnessError, match="--gamma"):
        cli.run(_parse(["--pair", "toy", "--gamma", "0"]))


def test_registered_suites_and_their_plans():
    assert {"default", "quick", "synthetic", "gpu"} <= set(suite_specs())
    synthetic = make_plan(BenchConfig(suite="synthetic")).cells
    tokens = [c for c in synthetic if c.kind == "tokens"]
    spec = [c for c in synthetic if c.kind == "spec"]
    assert len(tokens) == len(spec) == 6 * 8 and all(c.min_row_steps >= 10_000 for c in tokens)
    assert {c.gamma for c in spec} == set(range(1, 9)) and all(c.synthetic_cost_ms for c in spec)
    assert len({c.id for c in synthetic}) == len(synthetic)
    grid = make_plan(BenchConfig(pairs=("toy",))).cells
    assert {(c.kind, c.temperature) for c in grid if c.kind == "ar"} == {("ar", 0.0), ("ar", 1.0)}
    assert {c.gamma for c in grid if c.kind == "spec"} == set(range(1, 9))
    assert all(c.repeats >= 3 for c in grid)
    quick = make_plan(BenchConfig(quick=True))
    assert quick.suite == "quick" and len(quick.cells) < len(make_plan(BenchConfig()).cells)


def test_overrides_apply_to_every_timing_sweep_and_compare_hf_mirrors_them():
    cells = make_plan(BenchConfig(pairs=("toy",), gammas=(2,), temperatures=(1.0,), compare_hf=True,
                                  synthetic_cost_ms=(10.0, 1.0))).cells
    assert [(c.kind, c.gamma) for c in cells] == [("ar", 0), ("spec", 2), ("compare", 2)]
    assert all(c.synthetic_cost_ms == (10.0, 1.0) and c.threads == 1 for c in cells)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_gpu_suite_skips_cleanly_without_cuda_but_other_cuda_requests_are_errors(tmp_path, capsys):
    assert cli.run(_parse(["--suite", "gpu", "--out", str(tmp_path)])) == 0
    assert "skipped: no CUDA device" in capsys.readouterr().out
    assert not any(tmp_path.iterdir())
    with pytest.raises(HarnessError, match="--device cuda"):
        make_plan(BenchConfig(pairs=("toy",), device="cuda"))
