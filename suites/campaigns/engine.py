"""Engine-level calibration over HTTP: false alarms of the reference, detection of the generation zoo.

    specdec campaign engine [--seeds 100] [--mutant-seeds 20] [--samples 1000] [--out DIR]

Every implementation is served by `specdec serve`'s app (harness.served.serve.serving) on 127.0.0.1
and checked with `run_engine_check` against the local target (ground truth a): the reference over
`--seeds` seeds (the false-alarm rate at the gate, and at a nominal 0.05 for resolution), each
generation mutant over `--mutant-seeds` seeds (stopping once a run's verdict is decided), plus the
reference against a non-speculative scorer (ground truth b) and as a two-sample test (c) over
`--other-seeds` seeds. Writes report.md, calibration.json and the probe of the served reference.

Every run is a cell of the campaign runner (harness.runner), run in this process against the servers it holds
(WHERE = "local": a server is started when the first cell that needs it runs, and stopped when a cell needs
another) and journaled in OUT/journal.jsonl: a rerun resumes, and starts no server for the cells it already has.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time

from harness.configs import option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE
from harness.stats.rates import clopper_pearson

PAIR = "toy-low"  # α ≈ 0.2: residual and bonus paths run often, as in the generation-level campaign
GATE = DEFAULT_FALSE_ALARM_RATE
MUTANT_FIRST_SEED = 1000
REFERENCE = "reference_generate"
OTHER_GROUND_TRUTHS = ("score", "two-sample")
WHERE = "local"  # the cells run in this process, against the servers it holds


@dataclasses.dataclass
class Config:
    """`specdec campaign engine`: how many runs of each row, and their sizes."""

    seeds: int = option(100, "--seeds", "reference seeds (false-alarm rate, ground truth a)", int, "N")
    mutant_seeds: int = option(20, "--mutant-seeds", "seeds per generation mutant", int, "N")
    other_seeds: int = option(30, "--other-seeds", "reference seeds for ground truths b and c", int, "N")
    samples: int = option(1000, "--samples", "continuations per prompt × setting (reference, a)", int, "N")
    mutant_samples: int = option(2000, "--mutant-samples", "... for the mutants", int, "N")
    other_samples: int = option(1000, "--other-samples", "... for ground truths b and c", int, "N")


def validate(config: Config) -> None:
    from harness.errors import HarnessError

    if min(config.seeds, config.mutant_seeds, config.other_seeds) < 0:
        raise HarnessError("--seeds, --mutant-seeds and --other-seeds must be >= 0")
    if min(config.samples, config.mutant_samples, config.other_samples) < 1:
        raise HarnessError("--samples, --mutant-samples and --other-samples must be >= 1")


def provenance_fields(config: Config) -> dict:
    return {"seed": 0}


def mutants() -> tuple[list, list[str]]:
    """The generation mutants served here, and the names of those left out: an entry that needs sampling parameters
    (min_p, penalties, ...) in the request is blind at the engine level, which does not send them yet."""
    from harness.mutants.registry import implementations

    impls = implementations(kind="mutant", contract="generation")
    return [i for i in impls if not hasattr(i.fn, "settings")], [i.name for i in impls if hasattr(i.fn, "settings")]


def _key(name: str, ground_truth: str, pair: str, samples: int, seed: int) -> str:
    return f"{name}/{ground_truth}/{pair}/{samples}/{seed}"  # the server's port is not part of a cell's key


def cells(config: Config) -> dict[str, tuple]:
    """The probe of the served reference, then in this order what the gate rests on first: the reference (ground
    truth a), each mutant, the reference against a scorer (b) and as a two-sample test (c)."""
    out: dict[str, tuple] = {f"probe/{REFERENCE}/{PAIR}": ("probe", REFERENCE, "local", PAIR, 0, 0)}
    out.update({_key(REFERENCE, "local", PAIR, config.samples, s): ("check", REFERENCE, "local", PAIR,
                                                                     config.samples, s) for s in range(config.seeds)})
    for impl in mutants()[0]:
        pair = impl.pair or PAIR
        out.update({_key(impl.name, "local", pair, config.mutant_samples, s): ("check", impl.name, "local", pair,
                                                                              config.mutant_samples, s)
                    for s in range(MUTANT_FIRST_SEED, MUTANT_FIRST_SEED + config.mutant_seeds)})
    for gt in OTHER_GROUND_TRUTHS:
        out.update({_key(REFERENCE, gt, PAIR, config.other_samples, s): ("check", REFERENCE, gt, PAIR,
                                                                         config.other_samples, s)
                    for s in range(config.other_seeds)})
    return out


# The servers the cells run against: at most one set at a time (the reference; a mutant; the reference and its
# non-speculative scorer), started when a cell needs it and stopped when a cell needs another or the session ends.
_UP: dict = {"names": None, "stack": None, "urls": []}


def _start(name: str, pair: str):
    from harness.pairs import get_pair
    from harness.served.serve import serving
    from specdec_ref.adapters import generate

    if name == "scorer":  # speculation off, scoring the processed law: ground truth b at T != 1
        return serving(generate, get_pair(pair), speculative=False, logprobs_mode="processed_logprobs",
                       prompt_logprobs_mode="processed_logprobs")
    if name == REFERENCE:
        return serving(generate, get_pair(pair))
    from harness.mutants.registry import get

    return serving(get(name).fn, get_pair(pair))


def _servers(names: tuple[str, ...], pair: str) -> list[str]:
    if _UP["names"] != (names, pair):
        _stop()
        _UP["stack"] = stack = contextlib.ExitStack()  # stopped by the session even if a start below fails
        _UP["urls"] = [stack.enter_context(_start(n, pair)).url for n in names]
        _UP["names"] = (names, pair)
    return _UP["urls"]


def _stop() -> None:
    stack, _UP["stack"], _UP["names"], _UP["urls"] = _UP["stack"], None, None, []
    if stack is not None:
        stack.close()


@contextlib.contextmanager
def session(config: Config):
    """One torch thread in this process (the servers and the checks share it); every server stopped at the end."""
    import torch

    torch.set_num_threads(1)
    try:
        yield
    finally:
        _stop()


def _plain(x):
    if dataclasses.is_dataclass(x):
        return dataclasses.asdict(x)
    return float(x) if hasattr(x, "__float__") else str(x)


def run_cell(kind: str, name: str, ground_truth: str, pair: str, samples: int, seed: int) -> dict:
    """`probe`: `specdec probe` of the served reference; `check`: one `run_engine_check` of the served `name` for one
    seed (a mutant's run stops once decided; ground truths b and c send the scorer's endpoint) -> the report's row."""
    if kind == "probe":
        from harness.served.probe import probe

        (url,) = _servers((REFERENCE,), pair)
        return json.loads(json.dumps(probe(url), default=_plain))
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig
    from harness.stats.rates import family_p

    if ground_truth == "local":
        (url,) = _servers((name,), pair)
        extra = {}
    else:
        url, scorer = _servers((REFERENCE, "scorer"), pair)
        extra = {"ground_truth": ground_truth, "reference_endpoint": scorer}
    started = time.perf_counter()
    report = run_engine_check(EngineConfig(endpoint=url, pair=pair, samples=samples, seed=seed, false_alarm_rate=GATE,
                                           stop_on_fail=name != REFERENCE, **extra))
    row = {"name": name, "ground_truth": ground_truth, "pair": pair, "seed": seed, "fail": report.verdict == "fail",
           "family_p": family_p(report), "samples": report.samples, "detectable_tv": report.detectable_tv,
           "first_reject": next((t.name for t in report.tests if t.reject), None),
           "seconds": time.perf_counter() - started}
    return json.loads(json.dumps(row, default=_plain))


def summary(name: str, kind: str, ground_truth: str, runs: list[dict]) -> dict:
    """One row of the report: the rate at the gate and at a nominal 0.05 with their 95 % intervals."""
    if not runs:  # out of time before this row's first run
        return {"name": name, "kind": kind, "ground_truth": ground_truth, "runs": 0, "rate_at_gate": float("nan"),
                "ci_gate": (float("nan"), float("nan")), "rate_at_0.05": float("nan"), "ci_nominal": None,
                "samples_per_run": 0, "detectable_tv": float("nan"), "seconds": 0.0, "first_rejects": []}
    n, k_gate = len(runs), sum(r["fail"] for r in runs)
    k_nominal = sum(r["family_p"] <= 0.05 for r in runs)
    tvs = [r["detectable_tv"] for r in runs if r["detectable_tv"] is not None]
    return {"name": name, "kind": kind, "ground_truth": ground_truth, "runs": n, "rate_at_gate": k_gate / n,
            "ci_gate": clopper_pearson(k_gate, n), "rate_at_0.05": k_nominal / n,
            "ci_nominal": clopper_pearson(k_nominal, n), "samples_per_run": max(r["samples"] for r in runs),
            "detectable_tv": max(tvs) if tvs else float("nan"), "seconds": sum(r["seconds"] for r in runs),
            "first_rejects": sorted({r["first_reject"] for r in runs if r["first_reject"]})[:4]}


def rows(run) -> list[dict]:
    """The report's rows from the finished cells, in the cells' order (a row with no finished run says so)."""
    by_row: dict[tuple, list[dict]] = {}
    for key, args in run.cells.items():
        kind, name, gt, pair = args[:4]
        if kind == "check":
            runs = by_row.setdefault((name, gt, pair), [])
            if key in run.done:
                runs.append(run.done[key])
    from harness.mutants.registry import get

    out = []
    for (name, gt, pair), runs in by_row.items():
        row = summary(name, "control" if name == REFERENCE else "mutant", gt, runs)
        if name != REFERENCE:
            row |= {"pair": pair, "models": get(name).models}
        out.append(row)
    return out


def report_md(result: dict, command: str) -> str:
    cfg = result["config"]
    partial = result["cells_run"] < result["cells"]
    lines = ["# Engine level over HTTP: calibration against `specdec serve`", "",
             f"Command: `{command}` ({result['seconds'] / 60:.1f} min of this invocation on a shared 2-core machine, "
             "beside other jobs).", "",
             *([f"**Partial: {result['cells_run']} of {result['cells']} runs made (--budget-s / --stop-at); the same "
                "command resumes.**", ""] if partial else []),
             *([f"Not run: {', '.join(f'`{n}`' for n in result['skipped'])} — mutants that need optional "
                "sampling parameters (min_p, logit_bias, penalties, ...) in the request, which the engine level "
                "does not send yet (at default settings they are blind by construction).", ""]
               if result.get("skipped") else []),
             f"Every implementation is served over HTTP on 127.0.0.1 and checked with `specdec verify --level engine`'s "
             f"function (`run_engine_check`) on pair `{cfg['pair']}` (mutants: the pair their entry names), "
             f"{cfg['samples_per_cell']} continuations of 3 tokens per prompt × sampling setting for the reference "
             f"(ground truths b and c: {cfg['other_samples_per_cell']}; mutants: {cfg['mutant_samples_per_cell']}; "
             "the smaller reference samples are the harder case for false alarms, since the chi-square "
             "approximations only improve with n; 2 prompts; T = 0.7 / "
             "top-p 0.9 and T = 1) plus greedy equality on 2 prompts. Gate: family-wise false-alarm rate "
             f"{cfg['gate']:g} (Holm). Mutant runs stop once their verdict is decided. Intervals: Clopper–Pearson 95 %.",
             "", "| implementation | kind | ground truth | runs | rate at gate | 95 % CI | rate at 0.05 | samples/run "
             "| detectable TV | first rejecting tests |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lo, hi = r["ci_gate"]
        if not r["runs"]:
            lines.append(f"| `{r['name']}` | {r['kind']} | {r['ground_truth']} | 0 (out of time) | – | – | – | – | – | – |")
            continue
        lines.append(f"| `{r['name']}` | {r['kind']} | {r['ground_truth']} | {r['runs']} | {100 * r['rate_at_gate']:.1f} % "
                     f"| {100 * lo:.1f}–{100 * hi:.1f} % | {100 * r['rate_at_0.05']:.1f} % | {r['samples_per_run']} | "
                     f"{r['detectable_tv']:.3f} | {', '.join(f'`{t}`' for t in r['first_rejects']) or '-'} |")
    lines += ["", "For a mutant the rate is its detection rate; for the reference it is the false-alarm rate. "
              "Detectable TV: the largest planned detectable TV among the run's omnibus tests at power 0.99 "
              "(per tested position / per whole continuation; the two-sample tests see n_eff = n/2). "
              "Ground truth b here lists the whole vocabulary (V = 16 ≤ k = 20), so the coarsening hides no mass.",
              "", "## `specdec probe` of the served reference", "",
              *(["```", _probe_text(result["probe"]), "```"] if result.get("probe") else ["Not probed in this run."])]
    return "\n".join(lines) + "\n"


def _probe_text(info: dict) -> str:
    from harness.served.cli import probe_table

    return probe_table(info)


def report(run) -> int:
    """calibration.json, report.md and probe-serve.json; the rates printed. Exit 0: the rates are a measurement,
    the report states them (a partial run says so, and its rerun resumes)."""
    c = run.config
    probe_info = run.done.get(f"probe/{REFERENCE}/{PAIR}") or {}
    config = {"seeds": c.seeds, "mutant_seeds": c.mutant_seeds, "other_seeds": c.other_seeds,
              "samples_per_cell": c.samples, "other_samples_per_cell": c.other_samples,
              "mutant_samples_per_cell": c.mutant_samples, "pair": PAIR, "gate": GATE}
    result = {"rows": rows(run), "skipped": mutants()[1], "probe": probe_info, "seconds": run.seconds,
              "config": config, "cells": len(run.cells), "cells_run": len(run.done)}
    plain = json.loads(json.dumps(result, default=_plain))
    run.write_result("calibration.json", "campaign.engine", rows=plain["rows"],
                     summary={k: v for k, v in plain.items() if k != "rows"})
    run.write_text("report.md", report_md(result, run.command))
    if probe_info:
        from harness.served.probe import write_probe

        write_probe(run.out / "probe-serve.json", probe_info, {"endpoint": "specdec serve (this campaign's)",
                                                               "pair": PAIR})
    for r in result["rows"]:
        print(f"{r['name']:<34} {r['ground_truth']:<10} {r['kind']:<8} {100 * r['rate_at_gate']:5.1f}% of {r['runs']}")
    print(f"engine campaign -> {run.out}/report.md ({len(run.done)} of {len(run.cells)} cells)")
    return 0
