"""The engine level's greedy cell: token equality at T = 0 with the reference endpoint's greedy output, else with
the local target's; with a local model each first divergence is classified numerics (a near-tie: reported) vs
logic (fails), as the generation level does (harness.check.greedy). `run` is the check run
(harness.served.check.EngineRun).
"""

from __future__ import annotations

from harness.check.driver import Cell, Check
from harness.check.settings import Setting
from harness.errors import HarnessError
from harness.policy import catalogue
from harness.served import battery
from harness.served.draws import sample_rows
from harness.served.pieces import SHARED_PIECE
from harness.stats import TestResult

GREEDY_TOKENS = catalogue("sizes").ENGINE_GREEDY_TOKENS  # a run size: policy (suites/catalogues/sizes.py)


def draw_greedy(run, cell: Cell) -> tuple[list[TestResult], list[TestResult], list[dict]]:
    """Token equality at T = 0 with the reference endpoint (else the local target); divergences classified."""
    from harness.check.greedy import classify_divergence, greedy_target

    greedy, text = Setting(0.0), run.ground_truth == "two-sample"  # text: servers without ids compare texts
    prompts, gating, advisory, found = cell.data, [], [], []
    for i, prompt in enumerate(prompts):
        (got,), (got_why,) = sample_rows(run, run.engine, run.model, "engine-greedy", prompt, greedy, 1,
                                         GREEDY_TOKENS, 0, allow_text=text)
        if run.reference is not None:
            (want,), (want_why,) = sample_rows(run, run.reference, run.reference_model, "reference-greedy", prompt,
                                               greedy, 1, GREEDY_TOKENS, 0, allow_text=text)
        elif run.pair is not None:
            want, want_why = greedy_target(run.pair, list(prompt), GREEDY_TOKENS), None
        else:
            raise HarnessError("greedy equality needs a reference: give --reference-endpoint or --pair/--target")
        want, got = compared_up_to_classes(want, got, want_why, got_why, run.engine.classes)
        pos = next((j for j, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
                   None if want == got else min(len(want), len(got)))
        finding = None
        if pos is not None and run.pair is not None and all(isinstance(t, int) for t in want + got):
            finding = classify_divergence(run.pair, list(prompt), want, got, pos)
            found.append({"prompt": i, **finding})
        result = battery.greedy_result(f"greedy/prompt{i}", want, got, finding)
        if finding and finding["kind"] == "numerics (near-tie)":  # reported; the prompt's gating test passes
            advisory.append(result)
            result = battery.greedy_result(f"greedy/prompt{i}", want, want, None)
        gating.append(result)
    cell.summary.update(divergences=found,
                        reference="reference endpoint" if run.reference is not None else "local target")
    return gating, advisory, found


def compared_up_to_classes(want: list, got: list, want_why, got_why, classes) -> tuple[list, list]:
    """Greedy rows as far as both are known: a row cut at a shared piece (harness.served.pieces) ends in its
    class's representative, so both rows stop there and the other's token there becomes its class's."""
    cuts = [len(r) for r, why in ((want, want_why), (got, got_why)) if why == SHARED_PIECE]
    if not cuts or classes is None:
        return want, got
    k = min(cuts)
    want, got = ([int(classes[t]) if j == k - 1 else t for j, t in enumerate(r[:k])] for r in (want, got))
    return want, got


def _greedy_gating(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    return trials[0]


def _greedy_numerics(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    return trials[1]  # near-tie divergences: numerics, reported (their prompt's gating test passes)


ENGINE_GREEDY = Check("greedy_equality", lambda cell: len(cell.data), _greedy_gating)
ENGINE_GREEDY_NUMERICS = Check("greedy_numerics", lambda cell: 0, _greedy_numerics, gating=False)
