"""Convert the committed result JSON files (results/, docs/example-demo/) to the result envelope, once.

    python tools/convert_results.py            # rewrites every tracked file that is not an envelope yet
    python tools/convert_results.py --check    # lists what it would convert, writes nothing

Run once (issue 49, part 2) and committed with its output; the commands write envelopes themselves
(harness.envelope.write_result), so nothing reads the earlier formats afterwards. Rules:

- nothing is measured or recomputed: every number is moved, never changed (verdicts, statistics, timings);
- provenance takes the fields the file recorded (flat, under "provenance", or in its rows); a field it never
  recorded is written as "not recorded", never guessed;
- `config` is the configuration the file recorded; where it recorded none, or only part (check reports
  recorded their statistical settings, not the implementation's pair or settings), it carries
  {"not_recorded": ...}, which `specdec run --config` refuses;
- renamed keys: a check report's "alpha" (= its false_alarm_rate) is dropped; a bench row's acceptance rate
  "alpha" becomes "acceptance_rate"; the zoo config fields "gate_alpha" and "nominal_alpha" are "gate" and
  "nominal_rate" (their names since); check reports nested in other records lose "alpha" as well, and the
  batched bench's throughput parts name their acceptance rate "acceptance_rate".
JSONL journals are left as they are (docs/RESULTS-FORMAT.md: journals, not results).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.envelope import NOT_RECORDED, SCHEMA_VERSION, Envelope  # noqa: E402
from harness.records import atomic_write_json  # noqa: E402

PROVENANCE = ("seed", "git_commit", "machine", "versions", "device", "dtype", "utc_time")
CONVERTED = "converted from the earlier result format by tools/convert_results.py"
PARTIAL = ("the run's whole configuration (" + CONVERTED + "; the recorded fields are kept)")
CHECK_CONFIG = {"impl": "impl", "level": "level", "family": "family", "false_alarm_rate": "false_alarm_rate",
                "target_tv": "tv", "power": "power", "seed": "seed", "inconclusive_tv": "inconclusive_tv",
                "processing_order": "processing_order", "samples": None}


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "results", "docs/example-demo"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    return [ROOT / p for p in out if p.endswith(".json")]


def provenance_from(*sources: dict) -> dict:
    """The seven fields from the first source that has each; "not recorded" for the rest."""
    out = {}
    for name in PROVENANCE:
        found = [s[name] for s in sources if isinstance(s, dict) and name in s
                 and (s[name] is not None or name == "seed")]  # a seed recorded as null: nothing seeded per file
        out[name] = found[0] if found else NOT_RECORDED
    return out


def provenance_of_rows(rows: list[dict]) -> dict:
    """A run's provenance from its rows' own fields: one value, or the distinct values joined (seeds: a list)."""
    out = {}
    for name in PROVENANCE:
        values = [r[name] for r in rows if isinstance(r, dict) and r.get(name) is not None]
        if not values:
            out[name] = NOT_RECORDED
        elif name == "seed":
            seeds = sorted({v for v in values if isinstance(v, int)})
            out[name] = seeds[0] if len(seeds) == 1 else seeds
        elif name == "versions":
            distinct = [v for i, v in enumerate(values) if v not in values[:i]]
            out[name] = distinct[0] if len(distinct) == 1 else NOT_RECORDED
        elif name == "utc_time":
            out[name] = max(values)  # the last measurement the file holds
        else:
            out[name] = ", ".join(sorted({str(v) for v in values}))
    return out


def not_recorded(**recorded) -> dict:
    return {"not_recorded": PARTIAL if recorded else "the run's configuration (" + CONVERTED + ")", **recorded}


def _without(data: dict, *keys: str) -> dict:
    return {k: v for k, v in data.items() if k not in keys}


def check_report(data: dict) -> Envelope:
    if "alpha" in data and data["alpha"] != data["false_alarm_rate"]:
        raise ValueError("a check report whose alpha is not its false_alarm_rate")
    report = _without(data, "alpha", *PROVENANCE)
    config = {new: data[old] for old, new in CHECK_CONFIG.items() if new and old in data}
    tests = report.get("tests", [])
    summary = {"verdict": report["verdict"], "detectable_tv": report.get("detectable_tv"),
               "samples": report.get("samples"), "tests": len(tests), "declared_tests": report.get("declared_tests"),
               "rejected": sum(bool(t.get("reject")) for t in tests), "seconds": report.get("seconds")}
    return Envelope("check", not_recorded(**config), provenance_from(data), summary, report=report)


def bench_rows(rows: list[dict], http: bool) -> Envelope:
    rows = [{("acceptance_rate" if k == "alpha" else k): v for k, v in r.items()} for r in rows]
    return Envelope("bench.http" if http else "bench", not_recorded(), provenance_of_rows(rows),
                    {"cells": len(rows)}, rows=rows)


def pytest_benchmark(data: dict) -> Envelope:
    from harness.bench.pytest_record import envelope_of

    return envelope_of(data, not_recorded())


def mutants(data: dict, kind: str = "mutants") -> Envelope:
    config = dict(data.get("config") or {})
    for old, new in (("gate_alpha", "gate"), ("nominal_alpha", "nominal_rate")):
        if old in config:
            config[new] = config.pop(old)
    return Envelope(kind, config or not_recorded(), provenance_from(data.get("provenance", {}), data),
                    {k: v for k, v in data.items() if k not in ("config", "rows", "provenance", *PROVENANCE)},
                    rows=data["rows"])


def rows_of(data: dict, key: str, kind: str, *, config=None) -> Envelope:
    """A record whose runs / records sit under `key`: they are the rows; everything else but provenance the summary."""
    recorded = data.get("config")
    return Envelope(kind, recorded if isinstance(recorded, dict) else (config or not_recorded()),
                    provenance_from(data.get("provenance", {}), data),
                    {k: v for k, v in data.items() if k not in (key, "config", "provenance", *PROVENANCE)},
                    rows=data[key])


def report_of(data, kind: str, *, summary_keys: tuple[str, ...] = ()) -> Envelope:
    """A record that is one object: the report; its provenance where it recorded one."""
    prov = data.get("provenance") if isinstance(data.get("provenance"), dict) else {}
    report = _without(data, "provenance", *(PROVENANCE if prov or "git_commit" in data else ()))
    summary = {k: report.pop(k) for k in summary_keys if k in report}
    config = data.get("config") if isinstance(data.get("config"), dict) else not_recorded()
    report.pop("config", None)
    return Envelope(kind, config, provenance_from(prov, data), summary, report=report)


def drop_check_alpha(x):
    """Check reports nested in a record (a campaign's runs) lose their "alpha" too (it equals false_alarm_rate)."""
    if isinstance(x, list):
        return [drop_check_alpha(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "alpha" in x and "false_alarm_rate" in x:
        if x["alpha"] != x["false_alarm_rate"]:
            raise ValueError("a check report whose alpha is not its false_alarm_rate")
        x = _without(x, "alpha")
    return {k: drop_check_alpha(v) for k, v in x.items()}


def bench_batched(data: dict) -> Envelope:
    """bench_batched's throughput parts: their "alpha" is the measured acceptance rate."""
    data = dict(data)
    if isinstance(data.get("throughput"), dict):
        data["throughput"] = {part: ({("acceptance_rate" if k == "alpha" else k): v for k, v in values.items()}
                                     if isinstance(values, dict) else values)
                              for part, values in data["throughput"].items()}
    return report_of(data, "campaign.bench_batched")


def classify(rel: str, data) -> Envelope:
    data = drop_check_alpha(data)
    name = rel.rsplit("/", 1)[-1]
    if isinstance(data, list):
        if rel.endswith("/rows.json"):
            return bench_rows(data, http=not any(isinstance(r, dict) and "device" in r for r in data))
        if "/repro/" in rel:
            return Envelope("finding.vllm_cpu.repro", not_recorded(), provenance_of_rows(data), {"rows": len(data)},
                            rows=data)
    if isinstance(data, dict) and {"verdict", "impl", "level", "tests"} <= set(data):
        return check_report(data)
    if isinstance(data, dict) and "benchmarks" in data and "machine_info" in data:
        return pytest_benchmark(data)
    if name == "campaign.json" and isinstance(data, dict) and "curve" in data:
        return mutants(data)
    if name == "matrix.json":
        config = not_recorded(command=data.get("command"))
        return Envelope("check.matrix", config, provenance_from({}), {"counts": data.get("counts"),
                        "seconds": data.get("seconds"), "executor": data.get("executor")}, rows=data["cells"])
    table = {
        "results/bench/batched/batched.json": bench_batched,
        "results/bench/check-time/runs.json": lambda d: rows_of(d, "runs", "campaign.check_time"),
        "results/bench/costs/costs.json": lambda d: rows_of(d, "rows", "campaign.bench_costs"),
        "results/contexts/campaign.json": lambda d: report_of(d, "campaign.contexts", summary_keys=("summary",)),
        "results/engine/calibration.json": lambda d: rows_of(d, "rows", "campaign.engine"),
        "results/engine/pilot/calibration.json": lambda d: rows_of(d, "rows", "campaign.engine"),
        "results/estimate/coverage.json": lambda d: rows_of(d, "rows", "campaign.estimate"),
        "results/findings/api-semantics/results.json": lambda d: report_of(d, "finding.api_semantics"),
        "results/findings/llama-server/finding.json": lambda d: report_of(d, "campaign.llama_server"),
        "results/findings/llamacpp/finding.json": lambda d: report_of(d, "campaign.llamacpp.finding"),
        "results/findings/llamacpp/ids.json": lambda d: report_of(d, "campaign.llamacpp.ids"),
        "results/findings/llamacpp/ids-control.json": lambda d: report_of(d, "campaign.llamacpp.ids_control"),
        "results/headline/power.json": lambda d: rows_of(d, "rows", "campaign.headline"),
        "results/headline/timing.json": lambda d: rows_of(d, "rows", "campaign.headline.timing"),
        "results/tail/campaign.json": lambda d: rows_of(d, "records", "campaign.tail"),
        "results/tree/campaign.json": lambda d: rows_of(d, "rows", "campaign.tree"),
        "results/params/exact_tv.json": lambda d: report_of(d, "campaign.params.exact_tv"),
    }
    if rel in table:
        return table[rel](data)
    parts = rel.split("/")
    if parts[1] == "contexts":
        stem = name.removesuffix(".json")
        if stem in ("control", "mutant", "engine", "timing"):
            return report_of(data, f"campaign.contexts.{stem}", summary_keys=("chunks",))
        return report_of(data, f"campaign.contexts.{stem}")
    if parts[1] == "structured":
        return report_of(data, f"campaign.structured.{name.removesuffix('.json')}")
    if parts[1] == "families":
        return report_of(data, "campaign.families")
    if parts[1] == "engine" and name.startswith("probe-"):
        return report_of(data, "probe")
    if parts[1] in ("invariance", "sequential") and name == "runs.json":
        return rows_of(data, "runs", f"campaign.{parts[1]}")
    if parts[1] == "numerics":
        config = {**data["config"], "impl": data["impl"], "pair": data["pair"]}
        return Envelope("numerics", config, provenance_from(data["provenance"]),
                        {**data["summary"], "seconds": data["seconds"]}, rows=data["rows"])
    if "vllm-cpu" in rel and name.startswith("servers"):
        kind = "servers_alive_at_end" if name.endswith("_alive_at_end.json") else "servers"
        return report_of(data, f"campaign.vllm_cpu.{kind}")
    if name == "logprobs_processed_n_sweep.json":
        return Envelope("campaign.vllm_cpu.n_sweep", not_recorded(), provenance_from({}),
                        {"request": data["request"]}, rows=data["rows"])
    raise ValueError(f"{rel}: no conversion rule")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list what would be converted; write nothing")
    args = parser.parse_args(argv)
    converted = 0
    for path in tracked():
        rel = path.relative_to(ROOT).as_posix()
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("schema_version") == SCHEMA_VERSION:
            continue  # written by a command since: already an envelope
        envelope = classify(rel, data)
        converted += 1
        print(f"{envelope.kind:<36} {rel}")
        if not args.check:
            atomic_write_json(path, envelope.to_dict())
    print(f"{converted} files {'to convert' if args.check else 'converted'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
