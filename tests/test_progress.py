"""Progress everywhere: a plain line at a fixed interval when the output is not a terminal (even while
nothing advances), a tqdm bar with total and ETA in one, per-row ticks of wrapped B = 1 implementations."""

import io
import re
import time

import pytest
import torch

from harness.check.api import run_verify
from harness.check.config import CheckConfig
from harness.progress import Progress
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


def test_terminal_gets_a_bar_with_total_and_eta():
    stream = io.StringIO()
    with Progress(100, "bench", unit="est. s", stream=stream, terminal=True) as bar:
        bar.update(40)
    text = stream.getvalue()
    assert "40/100" in text and "<" in text  # tqdm's [elapsed<remaining]


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


@pytest.mark.statistical
def test_generation_level_knows_its_total_and_ticks_rows():
    rec = Recorder()
    torch.manual_seed(0)
    run_verify(CheckConfig(impl=broken.generate_one_row, level="generation", pair="toy", samples=10, contexts="none"), progress=rec)
    assert rec.total == 10 * 2 * 2  # samples × prompts × sampling settings (no contexts cell: --contexts none)
    assert sum(rec.updates) == rec.total and rec.rows >= rec.total
