"""The verification engine and `specdec verify`: verdicts, exit codes, bad input, JSON schema."""

import json

import numpy as np
import pytest

from harness.adapters.control import target_only_generate
from harness.check.api import run_verify
from harness.check.config import CheckConfig
from harness.check.sampler import custom_case, run_sampler_check
from harness.cli import main
from specdec_ref.adapters import generate, verify
from tests.impls import broken

FAST_CASES = ["anti-logits", "binary-gamma8", "q-zero-where-p-positive"]


def _sampler(impl, **kw):
    return run_verify(CheckConfig(impl=impl, level="sampler", cases=FAST_CASES, **kw))


def test_reference_passes_sampler_level():
    report = _sampler(verify)
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]
    assert report.detectable_tv <= 0.02 + 1e-9
    assert not report.wasteful


@pytest.mark.parametrize("mutant", [broken.always_accept, broken.residual_from_p])
def test_planted_bugs_fail_sampler_level(mutant):
    report = _sampler(mutant)
    assert report.verdict == "fail"


def test_b1_only_implementation_is_wrapped():
    report = run_verify(CheckConfig(impl=broken.one_row_only, level="sampler", cases=["binary-gamma8"], samples=300))
    assert any("one row at a time" in n for n in report.notes)
    assert all(t.name != "binary-gamma8/format" or not t.reject for t in report.tests)


@pytest.mark.parametrize("impl", [generate, target_only_generate])
@pytest.mark.stochastic(false_alarm=0.001, seed=0)  # PASS 0.001
def test_reference_and_control_pass_generation_level(impl):
    report = run_verify(CheckConfig(impl=impl, level="generation", pair="toy", samples=4000, contexts="none"))
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]


@pytest.mark.stochastic(false_alarm=0.01, seed=0)  # FAIL 0.01
def test_always_accept_fails_generation_level(monkeypatch):
    from specdec_ref import verify as verify_module
    from specdec_ref.generate import speculative_generate

    original = verify_module._accept_and_unnormalised_law  # what the generation loop's verify step calls

    def always_accept_generate(target, draft, input_ids, **kw):
        # u = 0 < p/q: every draft with p > 0 is accepted (transformers PR #28508)
        monkeypatch.setattr(verify_module, "_accept_and_unnormalised_law",
                            lambda p, q, x, u, **sums: original(p, q, x, u * 0, **sums))
        try:
            return speculative_generate(target, draft, input_ids, cache="recompute", **kw).tokens
        finally:
            monkeypatch.setattr(verify_module, "_accept_and_unnormalised_law", original)

    report = run_verify(CheckConfig(impl=always_accept_generate, level="generation", pair="toy-low", samples=4000, contexts="none"))
    assert report.verdict == "fail"


@pytest.mark.parametrize("spec,needle", [
    ("no_such_module:verify", "cannot import module"),
    ("tests.impls.broken:missing", "has no attribute"),
    ("tests.impls.broken:not_callable", "not callable"),
    ("tests.impls.broken:two_args", "cannot be called as the sampler contract"),
    ("tests.impls.broken", "MODULE:CALLABLE"),
])
def test_bad_impl_exit_2(spec, needle, capsys):
    assert main(["verify", "--impl", spec, "--cases", "binary-gamma8"]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert "Traceback" not in err


@pytest.mark.parametrize("impl,needle", [
    ("out_of_range", "outside [0,"), ("wrong_shape", "returned shape"), ("returns_nan", "NaN"),
])
def test_bad_outputs_fail_the_verdict(impl, needle, capsys, tmp_path):
    out = tmp_path / "r.json"
    code = main(["verify", "--impl", f"tests.impls.broken:{impl}", "--cases", "binary-gamma8", "--samples", "500",
                 "--json", str(out)])
    assert code == 1
    assert needle in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["kind"] == "check" and data["report"]["verdict"] == "fail" and data["summary"]["verdict"] == "fail"


def test_json_schema(tmp_path):
    out = tmp_path / "r.json"
    assert main(["verify", "--impl", "specdec_ref.adapters:verify", "--cases", "binary-gamma8", "--seed", "3",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())  # a result envelope (docs/RESULTS-FORMAT.md)
    report = data["report"]
    for key in ("verdict", "impl", "level", "tests", "samples", "false_alarm_rate", "detectable_tv"):
        assert key in report
    assert "alpha" not in report  # α is the acceptance rate; the false-alarm rate has its own name
    assert data["provenance"]["seed"] == 3 and data["config"]["seed"] == 3
    assert report["level"] == "sampler" and report["verdict"] == "pass" == data["summary"]["verdict"]
    assert {"name", "statistic", "p_value", "reject"} <= set(report["tests"][0])
    assert data["provenance"]["versions"]["torch"]


def test_bad_flags_exit_2(capsys):
    assert main(["verify", "--impl", "specdec_ref.adapters:verify", "--false-alarm-rate", "2"]) == 2
    capsys.readouterr()
    assert main(["verify", "--impl", "specdec_ref.adapters:verify", "--cases", "zipf1000-high-alphq"]) == 2
    assert "Did you mean 'zipf1000-high-alpha'" in capsys.readouterr().err
    assert main(["verify", "--impl", "specdec_ref.adapters:generate", "--level", "generation", "--pair", "toyy"]) == 2
    assert "Did you mean 'toy'" in capsys.readouterr().err


def test_row_independence_catches_shared_randomness():
    """The rows_independent test has a planted bug: neighbouring rows sharing their uniforms (marginals stay right)."""
    report = run_verify(CheckConfig(impl=broken.shared_uniforms_across_rows, level="sampler",
                                     cases=["zipf1000-high-alpha"], samples=3000))
    assert any(t.reject and t.name.endswith("rows_independent") for t in report.tests)


def test_one_token_laws_are_planned_and_pass():
    """Regression (found by the hypothesis suite): top-p 0.5 on V = 2 leaves one token per position (df 0)."""
    p = np.array([[1.0, 0.0], [0.0, 1.0]])
    q = np.array([[1.0, 0.0]])
    report = run_sampler_check(verify, cases=[custom_case("one-token", p, q)], seed=0, max_rows=5000)
    assert report.verdict == "pass" and report.samples > 0
    broken_report = run_sampler_check(broken.always_accept, cases=[custom_case("one-token-swapped", p, q[:, ::-1])],
                                      seed=0, max_rows=5000)
    assert broken_report.verdict == "fail"  # q proposes token 1 where p puts all mass on 0: support violation


@pytest.mark.stochastic(false_alarm=0.011, seed=0)  # PASS 0.001 + FAIL 0.01
def test_length_and_score_dtype_options_reach_the_generation_check():
    from harness.mutants.registry import get

    def run(impl):
        return run_verify(CheckConfig(impl=impl, level="generation", pair="toy", samples=2000, length=2,
                                      score_dtype="model", contexts="none"))

    report = run(generate)
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]
    sampling = [c for c in report.cases if "length" in c]
    assert sampling and all(c["length"] == 2 for c in sampling)
    assert any(t.name.endswith("pos1") for t in report.tests) and not any(t.name.endswith("pos2") for t in report.tests)
    assert run(get("greedy_verify_when_sampling").fn).verdict == "fail"  # the model-precision truth still catches a bug


@pytest.mark.parametrize("flags,needle", [(["--length", "0"], "--length"), (["--score-dtype", "half"], "invalid choice")])
def test_generation_option_misuse_exits_2(flags, needle, capsys):
    assert main(["verify", "--impl", "specdec_ref.adapters:generate", "--level", "generation", "--pair", "toy",
                 *flags]) == 2
    assert needle in capsys.readouterr().err
