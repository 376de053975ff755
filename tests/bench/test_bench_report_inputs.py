"""What a bench report says about its inputs: how many prompts each category cell rests on, with its spread,
and a label on every number measured on synthetic inputs (random token ids)."""

from __future__ import annotations

import json

import pytest

from harness.bench import http, measure
from harness.bench import plan as bench_plan
from harness.bench.cli import regime_lines, summary_lines
from harness.bench.config import BenchConfig
from harness.bench.http_report import write_http_report
from harness.bench.report import SYNTHETIC_LABEL
from harness.bench.runner import run_bench
from harness.models.pair import ModelPair
from harness.pairs import get_pair


@pytest.mark.parametrize("name", ["toy", "toy-pieces", "const-a0.8"])
def test_toy_pairs_prompts_are_synthetic(name):
    assert measure.synthetic_prompts(get_pair(name))


def test_only_prompts_encoded_from_a_text_catalogue_count_as_text():
    pair = ModelPair("p", None, None, 16, prompts=[[1, 2, 3]])
    assert measure.synthetic_prompts(pair)
    pair.meta["prompt_set"] = "suites/prompts/prompts.jsonl"
    assert not measure.synthetic_prompts(pair)
    pair.prompts = None  # no prompts: random ids drawn per cell
    assert measure.synthetic_prompts(pair)


def test_an_in_process_report_on_random_token_prompts_is_labelled(tmp_path, monkeypatch):
    sweep = bench_plan.Sweep("timing", ("toy",), gammas=(1,), temperatures=(0.0,), prompts=2, max_new_tokens=4,
                             repeats=1)
    monkeypatch.setitem(bench_plan._SUITES, "labels", bench_plan.SuiteSpec("labels", lambda quick: [sweep], "test"))
    run_bench(BenchConfig(suite="labels", out=str(tmp_path)))
    out = tmp_path / "labels"
    rows = json.loads((out / "rows.json").read_text())["rows"]
    spec = [r for r in rows if r["kind"] == "spec"]
    assert spec and all(r["random_prompts"] for r in rows)
    report = (out / "report.md").read_text()
    assert f"**{SYNTHETIC_LABEL}**: toy" in report  # the header
    assert f"#### {spec[0]['group']} [{SYNTHETIC_LABEL}]" in report  # the group's tables
    assert f"({spec[0]['distinct_prompts']})" in report and spec[0]["distinct_prompts"] == 2  # per-prompt cell: n
    assert all(SYNTHETIC_LABEL in line for line in summary_lines(rows) if line.startswith(spec[0]["group"]))
    assert all(SYNTHETIC_LABEL in line for line in regime_lines(rows))


def _records(prompts: dict[str, int], repeats: int = 2, text: str = "x") -> list[dict]:
    """Fake requests: every prompt of every category, on (2× faster on rag) and off, at concurrency 1."""
    out = []
    for k, (pid, cat) in enumerate((p, c) for c, n in prompts.items() for p in (f"{c}-{i}" for i in range(n))):
        for r in range(repeats):
            for role in http.ROLES:
                fast = 2.0 if role == "spec" and cat == "rag" else 1.0
                latency = (1.0 + 0.1 * k + 0.01 * r) / fast
                out.append({"role": role, "concurrency": 1, "repeat": r, "prompt": pid, "category": cat,
                            "seed": k, "tokens": 10, "latency_s": latency, "ttft_s": 0.1, "gaps_s": [0.1] * 9,
                            "chunks": 10, "streamed": True, "text": text})
    return out


def test_an_http_category_cell_states_its_prompts_requests_and_spread(tmp_path):
    records = _records({"rag": 5, "qa": 3})
    walls = {(role, 1): 10.0 for role in http.ROLES}
    rows = http.summarize(records, walls, {}, {(role, 1): True for role in http.ROLES})
    rag = next(r for r in rows if r["kind"] == "category" and r["role"] == "spec" and r["category"] == "rag")
    assert rag["prompts"] == 5 and rag["paired_requests"] == 10 and rag["speedup_paired_min"] == pytest.approx(2.0)
    config = http.HttpBenchConfig(endpoint="http://on", reference_endpoint="http://off", concurrency=(1,), repeats=2,
                                  max_tokens=10, prompts=[{"id": f"{c}-{i}", "category": c, "text": "t"}
                                                          for c, n in (("rag", 5), ("qa", 3)) for i in range(n)])
    write_http_report(tmp_path, rows, config, {"spec": "m", "nospec": "m"}, synthetic=http.id_text_replies(records))
    report = (tmp_path / "report.md").read_text()
    line = next(x for x in report.splitlines() if x.startswith("| rag"))
    assert "| 5 |" in line and "n = 10 requests of 5 prompts" in line and "IQR [2.000, 2.000]" in line
    qa = next(x for x in report.splitlines() if x.startswith("| qa"))
    assert "| 3 |" in qa and "n = 6 requests of 3 prompts" in qa


def test_catalogue_categories_select_pre_tokenized_text_prompts_in_process():
    from harness.errors import HarnessError
    from harness.prompts import pair_catalogue

    pair = get_pair("toy-pieces")
    rag = measure.selected_prompts(pair, ("catalogue:rag",))
    assert rag == [ids for _, ids in pair_catalogue(pair, ("rag",))] and len(rag) >= 20
    both = measure.selected_prompts(pair, ("catalogue:summarization", "catalogue:math-apples"))
    assert len(both) == len(pair_catalogue(pair, ("summarization",))) + 1
    with pytest.raises(HarnessError, match="no category or id 'poetry'"):
        measure.selected_prompts(pair, ("catalogue:poetry",))
    with pytest.raises(HarnessError, match="no tokenizer"):
        measure.selected_prompts(get_pair("toy"), ("catalogue:rag",))


def test_an_in_process_run_on_catalogue_prompts_is_not_labelled_synthetic(tmp_path, monkeypatch):
    sweep = bench_plan.Sweep("timing", ("toy-pieces",), gammas=(1,), temperatures=(0.0,), prompts=3, max_new_tokens=4,
                             repeats=1)
    monkeypatch.setitem(bench_plan._SUITES, "labels", bench_plan.SuiteSpec("labels", lambda quick: [sweep], "test"))
    run_bench(BenchConfig(suite="labels", out=str(tmp_path), prompt_select=("catalogue:math",)))
    out = tmp_path / "labels"
    rows = json.loads((out / "rows.json").read_text())["rows"]
    spec = next(r for r in rows if r["kind"] == "spec")
    assert not any(r["random_prompts"] for r in rows) and spec["distinct_prompts"] == 3
    report = (out / "report.md").read_text()
    assert SYNTHETIC_LABEL not in report and "catalogue:math" in report


@pytest.mark.parametrize(("reply", "synthetic"), [(" 3 11 0 7", True), ("Paris is the capital", False),
                                                  ("12 apples", False)])
def test_an_http_report_from_an_engine_without_tokenizer_is_labelled_synthetic(tmp_path, reply, synthetic):
    records = _records({"math": 2}, repeats=1, text=reply)
    assert http.id_text_replies(records) is synthetic
    rows = http.summarize(records, {(role, 1): 1.0 for role in http.ROLES}, {}, {(role, 1): True for role in http.ROLES})
    config = http.HttpBenchConfig(endpoint="http://on", reference_endpoint="http://off", concurrency=(1,), max_tokens=10,
                                  prompts=[{"id": f"math-{i}", "category": "math", "text": "t"} for i in range(2)])
    write_http_report(tmp_path, rows, config, {"spec": "m", "nospec": "m"}, synthetic=http.id_text_replies(records))
    report = (tmp_path / "report.md").read_text()
    assert (f"**{SYNTHETIC_LABEL}**" in report) is synthetic
    assert (f"on / off) [{SYNTHETIC_LABEL}]" in report) is synthetic
    assert json.loads((tmp_path / "rows.json").read_text())["summary"]["synthetic_inputs"] is synthetic


def test_in_process_categories_give_one_group_per_category_each_stating_its_prompts(tmp_path, monkeypatch):
    sweep = bench_plan.Sweep("timing", ("toy-pieces",), gammas=(1,), temperatures=(0.0,), prompts=2, max_new_tokens=3,
                             repeats=1)
    monkeypatch.setitem(bench_plan._SUITES, "cats", bench_plan.SuiteSpec("cats", lambda quick: [sweep], "test"))
    config = BenchConfig(suite="cats", out=str(tmp_path), categories=("math", "rag"))
    plan = bench_plan.make_plan(config)
    assert [c.prompt_select for c in plan.cells] == [("catalogue:math",)] * 2 + [("catalogue:rag",)] * 2
    run_bench(config)
    report = (tmp_path / "cats" / "report.md").read_text()
    assert "### By prompt category" in report and SYNTHETIC_LABEL not in report
    table = [line for line in report.splitlines() if line.startswith(("| math ", "| rag "))]
    assert len(table) == 2 and all(line.split("|")[6].strip() == "2" for line in table)  # the prompts column


def test_categories_in_process_are_checked_and_exclusive_with_prompt_select():
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match="poetry"):
        bench_plan.make_plan(BenchConfig(pairs=("toy-pieces",), categories=("poetry",)))
    with pytest.raises(HarnessError, match="both choose prompts"):
        BenchConfig(pairs=("toy-pieces",), categories=("rag",), prompt_select=("code",)).validate()
