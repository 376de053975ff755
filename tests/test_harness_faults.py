"""A fault of the harness, a model or a kernel is exit 2 in one line naming the component: never exit 1 ("not
lossless"), never a traceback (issue 44). Faults are planted at several depths of a run of the *reference* (a
lossless implementation): whatever breaks, the verdict can never be FAIL."""

from __future__ import annotations

import pytest
import torch

from harness.cli import main


class _KernelRefuses(RuntimeError):
    pass


def _raise(exc):
    def fail(*_args, **_kwargs):
        raise exc
    return fail


GENERATION = ["verify", "--impl", "specdec_ref.adapters:generate", "--level", "generation", "--pair", "toy",
              "--samples", "30", "--contexts", "none", "--allow-inconclusive"]
SAMPLER = ["verify", "--impl", "specdec_ref.adapters:verify", "--samples", "200", "--cases", "anti-logits"]

FAULTS = {
    # the ground-truth scorer: an IndexError from a cache the model cannot use (the Qwen3-Next traceback)
    "scorer": ("harness.check.pit.score_continuations", IndexError("list index out of range"), GENERATION,
               "harness.check.pit"),
    # the float64 scoring copy: a kernel that refuses the dtype
    "score-copy": ("harness.models.precision.scoring_copy",
                   _KernelRefuses("Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double"), GENERATION,
                   "harness.check"),
    # the statistics
    "statistics": ("harness.check.driver._run_checks", ZeroDivisionError("division by zero"), SAMPLER, "harness.check.driver"),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_a_harness_fault_is_exit_2_in_one_line_never_a_verdict(name, monkeypatch, capsys):
    target, exc, argv, component = FAULTS[name]
    module, attr = target.rsplit(".", 1)
    monkeypatch.setattr(f"{module}.{attr}", _raise(exc))
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("specdec: error: the run could not be done"), err
    assert type(exc).__name__ in lines[0] and component in lines[0], lines[0]
    assert "Traceback" not in out + err and "FAIL" not in out + err


def test_the_component_is_named_from_the_innermost_frame():
    from harness.errors import fault_component

    try:
        torch.zeros(2, 3) @ torch.zeros(2, 3)
    except RuntimeError as exc:
        assert fault_component(exc) == "test_harness_faults.py"  # torch's C++ raises from this frame
    try:
        from harness.contexts import random_contexts

        random_contexts(0, lengths=(3,), pairs=1)
    except RuntimeError as exc:
        assert fault_component(exc).startswith(("torch", "harness.contexts"))


def test_an_implementation_that_raises_is_still_exit_1(capsys):
    """The other side of the line: the implementation's own exception stays a verdict (docs/EXIT_CODES.md)."""
    code = main(["verify", "--impl", "tests.impls.broken:raises", "--samples", "50", "--cases", "anti-logits"])
    assert code == 1
    assert "specdec: FAIL" in capsys.readouterr().err
