"""The public API, `import specdec`: its names are pinned, load lazily, and `verify` runs every level's check."""

import pydoc
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import specdec
from harness.check.config import CheckConfig
from harness.check.report import CheckReport
from harness.errors import HarnessError
from harness.served.config import EngineConfig

ROOT = Path(__file__).resolve().parents[1]

# Changing this list changes the public API: say so in CHANGELOG.md.
PUBLIC = [
    "CheckConfig", "DraftAndVerifyFn", "EngineConfig", "GenerateFn", "HarnessError", "ModelPair", "Report",
    "TreeVerifyFn", "VerifyFn", "assert_lossless", "assert_lossless_block", "assert_lossless_generation",
    "assert_lossless_tree", "register_pair", "verify",
]
CASES = ["binary-gamma8", "anti-logits"]  # two cheap sampler cases (well under a second each)


def always_accept(target_probs, draft_probs, draft_tokens, generator):
    """A planted bug: every draft accepted, then a bonus token from p."""
    bonus = torch.multinomial(target_probs[:, -1].float(), 1, generator=generator)
    return torch.cat([draft_tokens, bonus], dim=1)


def test_all_is_pinned():
    assert sorted(specdec.__all__) == PUBLIC


def test_every_public_name_is_the_internal_object():
    import importlib

    # through sys.modules, not the package attributes: pytester's in-process runs (tests/test_plugin.py) re-import
    # harness.testing and leave the package attribute pointing at their copy
    contracts, pairs, testing = (importlib.import_module(f"harness.{m}") for m in ("contracts", "pairs", "testing"))

    assert specdec.CheckConfig is CheckConfig and specdec.EngineConfig is EngineConfig
    assert specdec.Report is CheckReport and specdec.HarnessError is HarnessError
    assert specdec.register_pair is pairs.register_pair and specdec.assert_lossless is testing.assert_lossless
    assert specdec.VerifyFn is contracts.VerifyFn
    with pytest.raises(AttributeError, match="no attribute 'run_battery'"):
        specdec.run_battery  # noqa: B018 - the internals are not reachable through the public module


def test_import_is_light_and_help_is_short_and_names_every_public_name():
    code = "import specdec, sys; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
    specdec.CheckConfig, specdec.Report  # noqa: B018 - loaded names are not dumped into help() either
    text = pydoc.render_doc(specdec, renderer=pydoc.plaintext)
    description = text.split("DESCRIPTION", 1)[1].split("FUNCTIONS", 1)[0]  # the module docstring
    missing = [name for name in PUBLIC if not re.search(rf"\b{name}\b", description)]
    assert missing == []  # each public name has its line in the docstring
    assert "CLASSES" not in text and "verify(impl" in text.split("FUNCTIONS", 1)[1]
    assert len(text.splitlines()) <= 80, len(text.splitlines())  # was 803 lines (issue 55)
    assert sorted(specdec.__all__) == PUBLIC and specdec.CheckConfig is CheckConfig  # the names still resolve


# A user's own module, written outside the repository (its frames are the user's, not the harness's): every
# contract's implementation raises on its second line.
USER_MODULE = """
def chain(target_probs, draft_probs, draft_tokens, generator):
    raise RuntimeError("user bug in chain")


def tree(target_probs, draft_probs, draft_tokens, parents, generator):
    raise RuntimeError("user bug in tree")


def draft_step(target_probs, draft_probs, generator):
    raise RuntimeError("user bug in draft_step")


def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
    raise RuntimeError("user bug in generate")
"""
LINE = {"chain": 3, "tree": 7, "draft_step": 11, "generate": 15}  # the raise of each


@pytest.fixture(scope="module")
def user_module(tmp_path_factory):
    import importlib.util

    path = tmp_path_factory.mktemp("user") / "mysampler.py"
    path.write_text(USER_MODULE)
    spec = importlib.util.spec_from_file_location("mysampler", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


@pytest.mark.parametrize("fn,fields,level", [
    ("chain", {"cases": ["anti-logits"]}, "sampler"),
    ("chain", {"family": "block", "cases": ["anti-logits"]}, "sampler"),
    ("tree", {"family": "tree", "cases": ["wr-b3-d2"]}, "tree"),
    ("draft_step", {"step": "draft_and_verify", "cases": ["anti-logits"]}, "draft_step"),
    ("generate", {"level": "generation", "pair": "toy", "contexts": "none"}, "generation"),
], ids=["chain", "block", "tree", "draft-and-verify", "generation"])
def test_verify_reports_an_implementation_that_raises_as_a_fail_naming_its_file_and_line(user_module, fn, fields,
                                                                                          level):
    """Issue 55: `specdec.verify(raising_fn)` returned no report (an internal ImplementationError escaped)."""
    module, path = user_module
    report = specdec.verify(getattr(module, fn), **fields)
    assert isinstance(report, specdec.Report) and (report.verdict, report.level) == ("fail", level)
    (line,) = report.failure_summary()
    assert "RuntimeError during " in line and f"user bug in {fn}" in line, line
    assert f"{path}:{LINE[fn]} in {fn}" in line, line  # the user's own file:line
    assert report.to_dict()["verdict"] == "fail" and report.to_dict()["implementation_error"] == line
    assert [t.name for t in report.tests if t.reject] == [f"{level}/implementation"]


def test_verify_passes_the_reference_and_fails_a_mutant_without_raising():
    report = specdec.verify("specdec_ref.adapters:verify", cases=CASES)
    assert isinstance(report, specdec.Report)
    assert (report.level, report.family, report.verdict) == ("sampler", "chain", "pass")
    bad = specdec.verify(always_accept, cases=["anti-logits"])
    assert bad.verdict == "fail" and any(t.reject for t in bad.tests)


def test_verify_takes_a_config_and_replaces_its_fields():
    config = CheckConfig(impl="specdec_ref.adapters:block_verify", family="block", cases=["anti-logits"])
    report = specdec.verify(config, seed=3)
    assert (report.family, report.seed, report.verdict) == ("block", 3, "pass")
    assert config.seed == 0  # the caller's config is not changed


def test_verify_names_an_unknown_field():
    with pytest.raises(TypeError, match="'sampels', which is not a field of CheckConfig. Did you mean 'samples'"):
        specdec.verify("specdec_ref.adapters:verify", sampels=10)


def test_verify_engine_level_builds_an_engine_config_and_validates_before_any_request():
    # no server runs here: the configuration is refused before the first request
    with pytest.raises(HarnessError, match="--ground-truth score needs --reference-endpoint"):
        specdec.verify(endpoint="http://127.0.0.1:9/v1", ground_truth="score")
    with pytest.raises(TypeError, match="not a field of EngineConfig"):
        specdec.verify(endpoint="http://127.0.0.1:9/v1", family="block")
    with pytest.raises(HarnessError, match="needs endpoint=URL"):
        specdec.verify(level="engine")
    with pytest.raises(HarnessError, match="not an implementation"):
        specdec.verify("specdec_ref.adapters:generate", endpoint="http://127.0.0.1:9/v1")



@pytest.mark.end_to_end
def test_python_dash_m_specdec_is_the_command_line():
    run = subprocess.run([sys.executable, "-m", "specdec", "pairs"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0 and "toy" in run.stdout


@pytest.mark.lint
def test_the_installed_top_level_names_are_pinned():
    """docs/DESIGN.md, "Installed top-level names": exactly these four; no new bare top-level name may be added
    (tests/test_wheel.py pins the built wheel's members)."""
    tomllib = pytest.importorskip("tomllib")
    from setuptools import find_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    top = {name.split(".")[0] for name in find_packages(str(ROOT), include=find["include"])}
    assert top == {"harness", "specdec", "specdec_ref", "suites"}


def test_any_integer_dtype_is_accepted_bool_and_float_are_not():
    """docs/CONTRACT.md §1a: int64 is the contract's dtype and any integer dtype is read as token ids (an int32
    return passes); bool and floating tensors are malformed output (issue 55 asked which one the contract means)."""
    from specdec_ref.adapters import verify as reference

    def as_int32(target_probs, draft_probs, draft_tokens, generator):
        return reference(target_probs, draft_probs, draft_tokens, generator).to(torch.int32)

    def as_bool(target_probs, draft_probs, draft_tokens, generator):
        return reference(target_probs, draft_probs, draft_tokens, generator) > 0

    report = specdec.verify(as_int32, cases=["anti-logits"])
    assert report.verdict == "pass" and not next(t for t in report.tests if t.name == "anti-logits/format").reject
    bad = specdec.verify(as_bool, cases=["anti-logits"])
    assert bad.verdict == "fail"
    assert "returned dtype torch.bool" in next(t for t in bad.tests if t.name == "anti-logits/format").details["message"]
