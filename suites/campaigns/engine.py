"""Engine-level calibration over HTTP: false alarms of the reference, detection of the generation zoo.

    specdec campaign engine --out results/engine [--seeds 100] [--mutant-seeds 20] [--samples 1000]

Every implementation is served by `specdec serve`'s app (harness.served.serve.serving) on 127.0.0.1
and checked with `run_engine_check` against the local target (ground truth a): the reference over
`--seeds` seeds (the false-alarm rate at the gate, and at a nominal 0.05 for resolution), each
generation mutant over `--mutant-seeds` seeds (stopping once a run's verdict is decided), plus the
reference against a non-speculative scorer (ground truth b) and as a two-sample test (c) over
`--other-seeds` seeds. Writes report.md, calibration.json and the probe of the served reference. Every run is a cell of
`harness.executor.run_cells`, journaled in OUT/journal.jsonl: a rerun resumes (`--stop-at` / `--budget-s`: no run
starts after them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from harness.configs import Parser, add_arguments, option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE
from harness.envelope import write_result
from harness.executor import Journal, LocalExecutor, add_runner_arguments, deadline, run_cells
from harness.pairs import get_pair
from harness.records import provenance
from harness.served.check import EngineConfig, run_engine_check
from harness.served.serve import serving
from harness.stats.rates import clopper_pearson, family_p
from suites.outputs import FOLDERS

PAIR = "toy-low"  # α ≈ 0.2: residual and bonus paths run often, as in the generation-level campaign
GATE = DEFAULT_FALSE_ALARM_RATE


def engine_run(url: str, seed: int, pair: str, samples: int, stop_on_fail: bool, extra: dict) -> dict:
    """One cell: `run_engine_check` of the server at `url` for one seed -> the row the report needs."""
    started = time.perf_counter()
    report = run_engine_check(EngineConfig(endpoint=url, pair=pair, samples=samples, seed=seed,
                                           false_alarm_rate=GATE, stop_on_fail=stop_on_fail, **extra))
    return {"seed": seed, "fail": report.verdict == "fail", "family_p": family_p(report),
            "samples": report.samples, "detectable_tv": report.detectable_tv,
            "first_reject": next((t.name for t in report.tests if t.reject), None),
            "seconds": time.perf_counter() - started}


def _runs(url: str, seeds, *, name: str, pair: str, samples: int, stop_on_fail: bool, journal=None, stop=None,
          **extra) -> list[dict]:
    """The seeds of one row as cells of `run_cells` (in this process: the server is this process's), journaled
    under the row's name, ground truth, seed and size (the server's port is not part of the key)."""
    gt = extra.get("ground_truth", "local")
    cells = {f"{name}/{gt}/{pair}/{samples}/{seed}": (url, seed, pair, samples, stop_on_fail, extra) for seed in seeds}
    with LocalExecutor() as ex:
        done = run_cells(ex, engine_run, cells, journal=journal, stop=stop)
    return [done[k] for k in cells if k in done]


def _summary(name: str, kind: str, ground_truth: str, rows: list[dict]) -> dict:
    if not rows:  # out of time before this row's first run
        return {"name": name, "kind": kind, "ground_truth": ground_truth, "runs": 0, "rate_at_gate": float("nan"),
                "ci_gate": (float("nan"), float("nan")), "rate_at_0.05": float("nan"), "ci_nominal": None,
                "samples_per_run": 0, "detectable_tv": float("nan"), "seconds": 0.0, "first_rejects": []}
    n, k_gate = len(rows), sum(r["fail"] for r in rows)
    k_nominal = sum(r["family_p"] <= 0.05 for r in rows)
    return {"name": name, "kind": kind, "ground_truth": ground_truth, "runs": n, "rate_at_gate": k_gate / n,
            "ci_gate": clopper_pearson(k_gate, n), "rate_at_0.05": k_nominal / n,
            "ci_nominal": clopper_pearson(k_nominal, n), "samples_per_run": max(r["samples"] for r in rows),
            "detectable_tv": max(r["detectable_tv"] for r in rows),
            "seconds": sum(r["seconds"] for r in rows), "first_rejects": sorted({r["first_reject"] for r in rows
                                                                                if r["first_reject"]})[:4]}


def calibrate(seeds: int, mutant_seeds: int, other_seeds: int, samples: int, other_samples: int,
              mutant_samples: int, on_row=None, journal=None, stop=None) -> dict:
    """All rows; `on_row(partial result)` after each (so an interrupted calibration still leaves its rows).
    `journal` / `stop`: the cell runner's journal (a rerun resumes) and deadline, for every row's runs."""
    from harness.mutants.registry import implementations
    from harness.served.probe import probe
    from specdec_ref.adapters import generate

    torch.set_num_threads(1)
    rows, started, skipped = _Rows(), time.perf_counter(), []
    config = {"seeds": seeds, "mutant_seeds": mutant_seeds, "other_seeds": other_seeds, "samples_per_cell": samples,
              "other_samples_per_cell": other_samples, "mutant_samples_per_cell": mutant_samples, "pair": PAIR,
              "gate": GATE}
    probe_info: dict = {}

    def result() -> dict:
        return {"rows": list(rows), "skipped": skipped, "probe": probe_info, "seconds": time.perf_counter() - started,
                "config": config,
                "provenance": provenance(seed=0, device="cpu", dtype="float32")}

    rows.on_append = lambda: on_row and on_row(result())
    runner = {"journal": journal, "stop": stop}
    # Order: what the gate rests on first (an interrupted run keeps every finished row).
    with serving(generate, get_pair(PAIR)) as ref:
        probe_info.update(probe(ref.url))
        rows.append(_summary("reference_generate", "control", "local",
                             _runs(ref.url, range(seeds), name="reference_generate", pair=PAIR, samples=samples, stop_on_fail=False,
                                   **runner)))
    for impl in implementations(kind="mutant", level="generation"):
        if hasattr(impl.fn, "settings"):  # needs sampling parameters (min_p, penalties, ...) in the request:
            skipped.append(impl.name)     # the engine level does not send them yet, so it would be blind
            continue
        pair = impl.pair or PAIR
        with serving(impl.fn, get_pair(pair)) as s:
            rows.append(_summary(impl.name, "mutant", "local", _runs(
                s.url, range(1000, 1000 + mutant_seeds), name=impl.name, pair=pair, samples=mutant_samples, stop_on_fail=True,
                **runner)) | {
                "pair": pair, "models": impl.models})
    with serving(generate, get_pair(PAIR)) as ref, \
            serving(generate, get_pair(PAIR), speculative=False, logprobs_mode="processed_logprobs",
                    prompt_logprobs_mode="processed_logprobs") as off:  # scores the processed law: (b) at T != 1
        for gt in ("score", "two-sample"):
            rows.append(_summary("reference_generate", "control", gt, _runs(
                ref.url, range(other_seeds), name="reference_generate", pair=PAIR, samples=other_samples, stop_on_fail=False, ground_truth=gt,
                reference_endpoint=off.url, **runner)))
    return result()


class _Rows(list):
    """A list that calls `on_append()` after each append (incremental reports)."""

    on_append = None

    def append(self, item) -> None:
        super().append(item)
        if self.on_append:
            self.on_append()


def report_md(result: dict, command: str) -> str:
    cfg = result["config"]
    lines = ["# Engine level over HTTP: calibration against `specdec serve`", "",
             f"Command: `{command}` ({result['seconds'] / 60:.1f} min on a shared 2-core machine, beside other "
             "jobs).", "",
             *([f"Not run: {', '.join(f'`{n}`' for n in result['skipped'])} — mutants that need the sampling "
                "optional sampling parameters (min_p, logit_bias, penalties, ...) in the request, which the engine level "
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


@dataclasses.dataclass
class Config:
    """`specdec campaign engine`: its flags (harness.configs.option)."""

    out: str = option(FOLDERS["campaign.engine"], "--out", "results folder (default: suites/outputs.py)", metavar="DIR")
    seeds: int = option(100, '--seeds', "reference seeds (false-alarm rate, ground truth a)", int)
    mutant_seeds: int = option(20, '--mutant-seeds', 'mutant seeds', int)
    other_seeds: int = option(30, '--other-seeds', "reference seeds for ground truths b and c", int)
    samples: int = option(1000, '--samples', "continuations per prompt × setting (reference, a)", int)
    mutant_samples: int = option(2000, '--mutant-samples', "... for the mutants", int)
    other_samples: int = option(1000, '--other-samples', "... for ground truths b and c", int)


def argument_parser() -> argparse.ArgumentParser:
    """`specdec campaign engine`: every flag from a config field (Config, the runner's)."""
    parser = Parser(description=__doc__.splitlines()[0], prog='specdec campaign engine')
    add_arguments(parser, Config)
    add_runner_arguments(parser, where=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser()
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "specdec campaign engine " + " ".join(argv if argv is not None else sys.argv[1:])

    def write(result: dict, final: bool = False) -> None:
        plain = json.loads(json.dumps(result, default=_plain))
        write_result(out / "calibration.json", "campaign.engine", config=plain["config"],
                     provenance=plain["provenance"], rows=plain["rows"],
                     summary={k: v for k, v in plain.items() if k not in ("config", "provenance", "rows")})
        text = report_md(result, command.strip())
        if not final:
            text = text.replace("\n\n", "\n\n**Partial: the calibration is still running (rows so far).**\n\n", 1)
        (out / "report.md").write_text(text, encoding="utf-8")

    result = calibrate(args.seeds, args.mutant_seeds, args.other_seeds, args.samples, args.other_samples,
                       args.mutant_samples, on_row=write,
                       journal=Journal(out / "journal.jsonl", fresh=args.fresh),  # every run kept: a rerun resumes
                       stop=deadline(args.stop_at, args.budget_s))
    write(result, final=True)
    from harness.served.probe import write_probe

    write_probe(out / "probe-serve.json", result["probe"], {"endpoint": "specdec serve (this campaign's)", "pair": PAIR})
    for r in result["rows"]:
        print(f"{r['name']:<34} {r['ground_truth']:<10} {r['kind']:<8} {100 * r['rate_at_gate']:5.1f}% of {r['runs']}")
    return 0


def _plain(x):
    if dataclasses.is_dataclass(x):
        return dataclasses.asdict(x)
    return float(x) if hasattr(x, "__float__") else str(x)


if __name__ == "__main__":
    sys.exit(main())
