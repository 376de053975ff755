"""Progress everywhere: a plain line at a fixed interval when the output is not a terminal (even while
nothing advances), a line redrawn in place in one, per-row ticks of wrapped B = 1 implementations; with a
check's plan, the line names the phase, the plan's total and an ETA whose basis is the cost of every step."""

import argparse
import io
import os
import re
import time

import pytest
import torch

from harness.check.api import run_verify
from harness.check.config import CheckConfig
from harness.progress import Progress, Step, default_interval, interrupted_line
from tests.impls import broken


def test_log_lines_keep_coming_while_a_long_call_runs():
    stream = io.StringIO()
    with Progress(200, "verify sampler", interval_s=0.05, stream=stream, terminal=False) as bar:
        bar.update(50)
        time.sleep(0.4)  # one long implementation call: no update at all
    lines = stream.getvalue().splitlines()
    assert lines[-1].endswith("(done)")  # no "started" line: a run refused at once prints only its error
    ticks = [line for line in lines if "ETA" in line]
    assert len(ticks) >= 4  # about one per interval, without any update()
    assert re.search(r"verify sampler: 50/200 rows \(25%\), 00:00 elapsed, ETA 00:0\d", ticks[0])


def test_rows_ticked_inside_a_batch_are_not_counted_twice():
    with Progress(10, "x", stream=io.StringIO(), terminal=False, interval_s=60) as bar:
        for _ in range(4):
            bar.row()
        assert bar.n == 4
        bar.update(4)  # the batch's own update: the 4 rows are already shown
        assert bar.n == 4
        bar.update(6)
        assert bar.n == 10


def test_terminal_line_is_redrawn_in_place_with_total_and_eta():
    stream = io.StringIO()
    with Progress(100, "bench", unit="est. s", stream=stream, terminal=True, interval_s=60) as bar:
        bar.update(40)
        time.sleep(1.3)  # the terminal's own refresh: elapsed and ETA move on without an update
    text = stream.getvalue()
    assert text.startswith("\r") and text.endswith("\n")
    frames = [f for f in text.split("\r") if f]
    assert len(frames) >= 2
    assert "bench: 40/100 est. s (40%)" in frames[0] and "ETA" in frames[0]


def _plan():
    # a cheap phase with many units, then a dear one with few: equal cost (10 × 100 = 1000 × 1)
    return [Step("cheap", "case", 1000, cost=1.0), Step("dear", "case", 10, cost=100.0)]


def test_the_plan_weights_work_by_cost_not_by_count():
    bar = Progress(None, "verify sampler", stream=io.StringIO(), terminal=False, interval_s=60)
    bar.plan(_plan())
    assert bar.total == 1010  # the plan's total, in its units
    bar.enter("cheap")
    bar.update(1000)
    assert bar.fraction() == pytest.approx(0.5)  # 99 % of the rows, half of the work
    bar.tested("cheap")
    bar.enter("dear")
    bar.update(5)
    assert bar.fraction() == pytest.approx(0.75)
    bar._planned_at = 100.0
    assert bar.eta(now=130.0) == pytest.approx(10.0)  # 30 s for 3/4 of the cost: 10 s for the last quarter
    bar.close()


def test_the_line_gives_phase_total_work_and_eta():
    bar = Progress(None, "verify generation", unit="samples", stream=io.StringIO(), terminal=False, interval_s=60)
    bar.plan([Step("T=1/prompt0", "generation cells", 200, cost=3.0),
              Step("T=1/contexts", "context cells", 100, cost=50.0, test_cost=5000.0)])
    bar.enter("T=1/prompt0")
    bar.update(200)
    bar.tested("T=1/prompt0")
    bar.enter("T=1/contexts")
    bar.update(20)
    line = bar.line()
    assert line.startswith("verify generation [context cells: T=1/contexts, 2/2]: 220/300 samples (73%)")
    assert re.search(r", 15% of the work, \d\d:\d\d elapsed, ETA \d\d:\d\d$", line)  # (600 + 1000) / 10,600
    bar.enter("T=1/contexts", testing=True)
    assert "[context cells: T=1/contexts, 2/2, testing]" in bar.line()
    assert bar.fraction() == pytest.approx(5600 / 10600)  # its draw is over; its tests (the scoring) are not
    bar.close()


def test_steps_of_unknown_size_count_whole_and_top_ups_grow_the_total():
    bar = Progress(None, "verify engine", unit="requests", stream=io.StringIO(), terminal=False, interval_s=60)
    bar.plan([Step("api/T=1/prompt0", "API battery", None, cost=40.0), Step("T=1/prompt0", "law", 20, cost=3.0)])
    assert bar.total == 20 and "+ 1 cell not in this count" in bar.line()
    bar.enter("api/T=1/prompt0")
    bar.update(7)  # requests of a cell whose count was not known: shown, not credited until it is over
    assert bar.fraction() == 0
    bar.tested("api/T=1/prompt0")
    assert bar.fraction() == pytest.approx(0.4)
    bar.extend("T=1/prompt0", 10)
    assert bar.total == 30
    bar.close()


def test_without_a_plan_the_line_is_the_count(monkeypatch):
    bar = Progress(8, "numerics", unit="prompts", stream=io.StringIO(), terminal=False, interval_s=60)
    bar.update(2)
    assert bar.fraction() == 0.25 and "[" not in bar.line()
    bar.close()
    monkeypatch.setenv("SPECDEC_PROGRESS_S", "2.5")
    assert default_interval() == 2.5
    monkeypatch.setenv("SPECDEC_PROGRESS_S", "soon")
    assert default_interval() == 30.0


def test_ctrl_c_says_what_was_kept(tmp_path):
    started = time.time()
    args = argparse.Namespace(command="verify", json=str(tmp_path / "report.json"), out=None)
    assert interrupted_line(args, started) == f"specdec: interrupted: nothing was written (nothing new at {args.json})"
    assert interrupted_line(argparse.Namespace(command="verify"), started) == "specdec: interrupted: nothing was written"
    out = tmp_path / "responses"
    out.mkdir()
    (out / "old.jsonl").write_text("{}\n")
    os.utime(out / "old.jsonl", (started - 100, started - 100))  # an earlier run's: not this run's
    args = argparse.Namespace(command="verify", json=None, out=str(out))
    assert interrupted_line(args, started) == f"specdec: interrupted: nothing was written (nothing new at {out})"
    (out / "responses.jsonl").write_text("{}\n")
    assert interrupted_line(args, started) == f"specdec: interrupted: kept {out / 'responses.jsonl'} (written by this run)"
    campaign = argparse.Namespace(command="campaign", name="zoo", args=["--out", str(out), "--seeds", "2"])
    (out / "journal.jsonl").write_text("{}\n")
    assert interrupted_line(campaign, started) == f"specdec: interrupted: kept 2 files written by this run under {out}"


def test_a_real_check_prints_phase_total_and_eta(monkeypatch, capsys):
    """The CLI's stderr on a short sampler check whose implementation is slow enough to be watched."""
    from harness.cli import main

    monkeypatch.setenv("SPECDEC_PROGRESS_S", "0.05")
    code = main(["verify", "--impl", "tests.impls.slow:verify", "--cases", "anti-logits", "llm-width-32000",
                 "--samples", "400"])
    err = capsys.readouterr().err.splitlines()
    assert code == 0
    ticks = [line for line in err if line.startswith("verify sampler [")]
    assert ticks, err
    pattern = (r"verify sampler \[case (anti-logits|llm-width-32000), [12]/2(, testing)?\]: [\d,]+/800 rows "
               r"\(\d+%\), \d+% of the work, \d\d:\d\d elapsed(, ETA \d\d:\d\d)?$")
    assert all(re.match(pattern, line) for line in ticks), ticks
    assert any("llm-width-32000" in line and "ETA" in line for line in ticks), ticks
    assert err[-1].startswith("verify sampler: 800/800 rows (100%), 100% of the work") and err[-1].endswith("(done)")


class Recorder:
    def __init__(self):
        self.rows, self.updates, self.total = 0, [], None

    def __call__(self, n):
        self.updates.append(n)

    def row(self):
        self.rows += 1

    def set_total(self, total):
        self.total = total


def test_wrapped_one_row_sampler_ticks_every_row():
    rec = Recorder()
    run_verify(CheckConfig(impl=broken.one_row_only, cases=["anti-logits"], samples=40), progress=rec)
    assert rec.updates == [40]
    assert rec.rows >= 40  # every row of the case (plus the reproducibility rows), not once per case


@pytest.mark.end_to_end
def test_generation_level_knows_its_total_and_ticks_rows():
    rec = Recorder()
    torch.manual_seed(0)
    run_verify(CheckConfig(impl=broken.generate_one_row, level="generation", pair="toy", samples=10, contexts="none"), progress=rec)
    assert rec.total == 10 * 2 * 2  # samples × prompts × sampling settings (no contexts cell: --contexts none)
    assert sum(rec.updates) == rec.total and rec.rows >= rec.total


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_python_api_shows_progress_on_a_terminal_by_default(monkeypatch):
    import sys

    import specdec

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    report = specdec.verify("specdec_ref.adapters:verify", cases=["anti-logits"], samples=500)
    assert report.verdict == "pass"
    text = terminal.getvalue()
    assert "\rverify sampler [case anti-logits, 1/1]" in text
    assert re.search(r"\rverify sampler: 500/500 rows \(100%\), 100% of the work, \d\d:\d\d elapsed\x1b\[K\n$", text)
    quiet = _Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    specdec.verify("specdec_ref.adapters:verify", cases=["anti-logits"], samples=500, progress=False)
    assert quiet.getvalue() == ""
    log = io.StringIO()  # not a terminal (a notebook, a log file): nothing by default
    monkeypatch.setattr(sys, "stderr", log)
    specdec.verify("specdec_ref.adapters:verify", cases=["anti-logits"], samples=500)
    assert log.getvalue() == ""


@pytest.mark.stochastic(false_alarm=0.001, seed=3)  # PASS 0.001
def test_the_engine_level_line_names_its_phase_and_counts_requests():
    from harness.check.settings import Setting
    from harness.pairs import get_pair
    from harness.served.check import run_engine_check
    from harness.served.config import EngineConfig
    from harness.served.serve import serving
    from specdec_ref.adapters import generate

    stream = io.StringIO()
    with serving(generate, get_pair("toy-low")) as served, \
            Progress(None, "verify engine", stream=stream, terminal=False, interval_s=0.05) as bar:
        report = run_engine_check(EngineConfig(endpoint=served.url + "/v1", pair="toy-low", samples=600, prompts=1,
                                               chunk=100, settings=(Setting(0.0), Setting(0.7, top_p=0.9)), seed=3),
                                  progress=bar)
    assert report.verdict == "pass"
    lines = stream.getvalue().splitlines()
    law = [line for line in lines if line.startswith("verify engine [law: T=0.7,top_p=0.9/prompt0, ")]
    assert law, lines
    assert all(re.search(r"\]: \d+/6 requests \(\d+%\) \+ \d cells? not in this count, \d+% of the work", line)
               for line in law), law  # 600 rows in requests of 100; greedy (and the API battery) counted whole
    assert any("ETA" in line for line in law), law
    assert lines[-1].startswith("verify engine: ") and lines[-1].endswith("(done)")


def test_ctrl_c_in_a_run_says_nothing_was_written(tmp_path, capsys):
    from harness.cli import main

    report = tmp_path / "report.json"
    assert main(["verify", "--impl", "tests.impls.slow:interrupt", "--json", str(report)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"specdec: interrupted: nothing was written (nothing new at {report})"
    assert not report.exists()
