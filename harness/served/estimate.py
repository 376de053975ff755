"""Engine-level estimates (issue 46): how far a served engine's output is from the target, not only whether.

The generation level's estimator, unchanged (`harness.stats.estimate.continuation_estimates`): per (prompt, sampling
setting) cell, a bias-corrected TV of the whole continuation's law (the joint law of its tokens) and of each
position's token against the target's exact joint law, with a 95 % interval. The target's law is enumerable only
with a local toy pair (ground truth `local`, V <= ENUMERATION_MAX_VOCAB); elsewhere no estimate is made and the
report says why.

The engine is a black box: its exact law is known only when the user states what it serves (`--served-impl
MODULE:CALLABLE`, the `specdec serve --impl` of the server, and `--gamma`, its γ). Then the exact TV of that
implementation's continuation law goes beside each estimate: the reference and the target alone have the target's
law (TV 0); a zoo entry that carries `exact_continuation_law` (p/q-hook and lifted-rule mutants of
harness.mutants.generation, such as `relaxed_acceptance_generate`) has its own, enumerated. The check takes that
statement on trust: it cannot see the server's code, only its tokens.
"""

from __future__ import annotations

# Implementations whose continuation law is the target's by construction (the lossless reference, the target alone).
TARGET_LAW = ("specdec_ref.adapters:generate", "harness.adapters.control:target_only_generate")
TARGET = "target"  # `served_law`'s answer for them: the target's own law


def served_law(spec: str | None):
    """`--served-impl`: the served implementation's exact continuation law, as a function (target, draft, prompt,
    length, gamma, setting, eos) -> {continuation: probability}; `TARGET` where it is the target's own law; None
    without a statement or for an implementation whose law is not enumerable. A spec that does not load as a
    generation-level implementation is a usage error (HarnessError, exit 2)."""
    if spec is None:
        return None
    from harness.check.api import resolve

    fn = resolve(spec, "generation")
    if spec in TARGET_LAW:
        return TARGET
    return getattr(fn, "exact_continuation_law", None)


def estimable(run) -> str | None:
    """None when the engine run can carry estimates, else why not (noted in the report)."""
    from harness.check.exact_laws import ENUMERATION_MAX_VOCAB

    if run.ground_truth != "local":
        return (f"ground truth {run.ground_truth}: no local target, so no exact law of the target to estimate the "
                "TV against (give --pair with a toy pair)")
    if run.pair.vocab_size > ENUMERATION_MAX_VOCAB:
        return (f"the target's joint law is enumerable only for V <= {ENUMERATION_MAX_VOCAB} (a toy pair); "
                f"{run.pair.name} has V = {run.pair.vocab_size}")
    if run.engine.classes is not None:
        return "the engine reports tokens only up to classes of shared text pieces: no estimate on coarsened laws"
    return None


def estimate_run(cell, trials, rate: float, power: float) -> list:
    """Advisory check of a prompt cell: its continuations' estimates into the cell's "tv_estimates" (every cell with
    --estimate, else only a cell that fails: a FAIL report's default); the exact TV beside each where
    `--served-impl` names an implementation with an enumerable law. Reports, never gates."""
    from harness.check.exact_laws import continuation_law, target64
    from harness.check.streams import numpy_rng
    from harness.stats.estimate import continuation_estimates
    from specdec_ref.generate import default_eos, eos_set

    run, data = cell.summary["_run"], cell.data
    config = run.config
    if not config.estimate and not cell.decided(rate):
        return []
    model = target64(run.pair) if config.score_dtype == "float64" else run.pair.target
    eos = eos_set(default_eos(run.pair.target))
    prompt = list(data.prompt)
    law = continuation_law(model, prompt, run.length, data.setting, run.pair.vocab_size, eos,
                           config.processing_order)
    exact = served_law(config.served_impl) if config.processing_order == "standard" else None
    emitted = law if exact == TARGET else None if exact is None else exact(
        model, run.pair.draft, prompt, run.length, config.gamma, data.setting, eos)  # as the generation level
    rows = [tuple(r) for r in trials[0]]
    rng = numpy_rng(config.seed, "estimate", cell.name)
    cell.summary["tv_estimates"] = [{"law": "", **e} for e in continuation_estimates(
        rows, law, run.pair.vocab_size, length=run.length, emitted=emitted, rng=rng)]
    return []


def notes(report, run) -> list[str]:
    """What the report says about its estimates: why there are none, or what the exact TV beside them rests on."""
    config = run.config
    if not (config.estimate or config.fail_estimate) or "tokens" not in config.checks:
        return []
    why = estimable(run)
    if why is not None:
        return [f"estimates: none at the engine level here: {why}"] if config.estimate else []
    if not report.estimates:
        return []
    if config.served_impl is None:
        return ["estimates: TV of the engine's continuations against the target's exact joint law; no exact TV "
                "beside them (the engine's own law is unknown: --served-impl MODULE:CALLABLE states what it serves)"]
    if not any("exact_tv" in e for e in report.estimates):
        return [f"estimates: --served-impl {config.served_impl} has no enumerable continuation law (a zoo entry "
                "changing p, q or the acceptance rule has one): no exact TV beside the estimates"]
    return [f"estimates: the exact TV beside each is that of {config.served_impl} at γ = {config.gamma}, as stated by "
            "--served-impl / --gamma (taken on trust: the check sees only the engine's tokens)"]
