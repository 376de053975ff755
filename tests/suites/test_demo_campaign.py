"""`specdec demo` on the campaign runner (suites/campaigns/demo.py): its parts, report, stop, exit codes and rerun.

The real demo takes minutes (docs/example-demo is its documented run); here every part runs at a tiny size on the
toy pair (the same code path: run_verify, run_bench, the report), through `specdec demo` itself."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.bench.config import BenchConfig
from harness.check.config import CheckConfig
from harness.cli import main
from harness.envelope import read_result
from suites.campaigns import demo
from suites.campaigns._commands import specdec_parser


def _tiny_bench(run_name: str, out: Path, **kw) -> BenchConfig:
    return BenchConfig(pairs=("toy",), gammas=(2,), temperatures=(1.0,), repeats=1, prompts=1, max_new_tokens=4,
                       out=str(out), run_name=run_name, resume=False, interleave=True, threads=1, **kw)


@pytest.fixture
def tiny(monkeypatch):
    """The demo's parts at a tiny size on the toy pair; `sampler_impl` can be swapped for a planted bug."""
    state = {"sampler_impl": "specdec_ref.adapters:verify"}
    monkeypatch.setattr(demo, "choose_pair", lambda: ("toy", "the toy pair (test)"))
    monkeypatch.setattr(demo, "sampler_config", lambda *, quick: CheckConfig(
        impl=state["sampler_impl"], level="sampler", cases=["binary-gamma8"], samples=400, seed=3, inconclusive_tv=0.5))
    monkeypatch.setattr(demo, "demo_generation_config", lambda pair, *, quick=False, **o: CheckConfig(
        impl="specdec_ref.adapters:generate", level="generation", pair="toy", samples=60, settings=["T=1"],
        contexts="none", seed=3, inconclusive_tv=0.5))
    monkeypatch.setattr(demo, "demo_bench_config", lambda pair, out, *, quick: _tiny_bench("bench", out))
    monkeypatch.setattr(demo, "demo_regime_configs", lambda pair, out, *, quick: [
        ("a second toy sweep (test)", _tiny_bench("bench-regime", out))])
    return state


def test_the_demo_runs_its_parts_in_order_and_writes_its_report_and_records(tiny, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "specdec demo: using the toy pair (test)" in printed.out and "demo report:" in printed.out
    report = (out / "report.md").read_text()
    assert "Pair: **toy** — the toy pair (test)." in report
    parts = {r["part"]: r for r in json.loads((out / "demo.json").read_text())["rows"]}
    assert [row[:2] for row in demo.verify_rows(parts)] == [["[sampler](verify_sampler.json)", "**PASS**"],
                                                            ["[generation](verify_generation.json)", "**PASS**"]]
    assert "| [sampler](verify_sampler.json) |" in report and report.splitlines()[2].startswith("Generated ")
    assert "## Speedup of the reference" in report and "Full report: [bench/report.md](bench/report.md)" in report
    assert "### A second toy sweep (test)" in report and "bench-regime/report.md" in report
    for name in ("verify_sampler.json", "verify_generation.json", "demo.json"):
        read_result(out / name)  # each an envelope
    record = json.loads((out / "demo.json").read_text())
    assert record["kind"] == "campaign.demo" and record["config"] == {"quick": False}
    assert [r["part"] for r in record["rows"]] == ["verify/sampler", "verify/generation", "bench", "regime/0"]
    assert record["summary"]["verdicts"] == {"sampler": "pass", "generation": "pass"}
    assert record["provenance"]["git_commit"] and record["provenance"]["seed"] == 0
    assert not (out / "journal.jsonl").exists()  # every number is measured by this run: no journal, no resume


def test_a_failing_verdict_is_exit_1_and_the_report_says_fail(tiny, tmp_path):
    tiny["sampler_impl"] = "harness.mutants.sampler:always_accept"
    assert main(["demo", "--out", str(tmp_path)]) == 1
    parts = {r["part"]: r for r in json.loads((tmp_path / "demo.json").read_text())["rows"]}
    assert demo.verify_rows(parts)[0][1] == "**FAIL**"


def test_a_budget_that_ends_before_a_part_is_exit_2_in_one_line_and_the_report_lists_the_rest(tiny, tmp_path,
                                                                                               capsys):
    assert main(["demo", "--out", str(tmp_path), "--budget-s", "0"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("specdec")]  # the runner's progress lines aside
    assert len(errors) == 1 and errors[0].startswith("specdec: error:") and "verify/sampler" in errors[0]
    assert "Traceback" not in err
    report = (tmp_path / "report.md").read_text()
    assert "Stopped by --stop-at / --budget-s before: verify/sampler, verify/generation, bench, regime/0" in report
    assert not (tmp_path / "verify_sampler.json").exists()


def test_specdec_campaign_demo_is_specdec_demo_and_reruns_from_its_record(tiny, tmp_path):
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["campaign", "demo", "--out", str(first)]) == 0
    assert main(["run", "--config", str(first / "demo.json"), "--out", str(again)]) == 0
    a, b = (json.loads((d / "demo.json").read_text()) for d in (first, again))
    assert a["config"] == b["config"] and [r["part"] for r in a["rows"]] == [r["part"] for r in b["rows"]]
    assert (again / "report.md").exists()


def test_the_demo_flags_come_from_its_config_and_the_runner():
    from harness.runner import RunnerConfig
    from suites.campaigns._commands import DemoConfig

    assert [f.name for f in dataclasses.fields(DemoConfig)] == ["quick"]
    assert demo.Config is DemoConfig and DemoConfig.JOURNALED is False
    assert "out" in {f.name for f in dataclasses.fields(RunnerConfig)}
    # never journaled: `specdec demo --help` offers no --fresh / --report-only (there is nothing to forget or report)
    flags = {o for a in specdec_parser("demo")._actions for o in a.option_strings}
    assert {"--out", "--stop-at", "--quick"} <= flags and not flags & {"--fresh", "--report-only"}
