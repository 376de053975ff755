"""What results/ keeps in git (results/README.md, "What git keeps"; docs/DESIGN.md, "results/ in git"): the reports
and the records they are written from. An engine check's response dump (`OUT/engine-<16 hex>.jsonl`, the check's
resume cache) is kept only in a folder some report is written from; no tracked file is over the size limit; and git
ignores a new dump anywhere else, so a producer's run leaves none to commit by accident."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 4_000_000  # the largest tracked files when this was decided: results/peers/journal.jsonl 1.67 MB, architectures' campaign.json 1.32 MB
RESPONSE_DUMP = re.compile(r"(^|/)engine-[0-9a-f]{16}\.jsonl$")
# folder -> the report written from its response dumps
READ_BY_A_REPORT = {
    "results/findings/vllm-cpu/responses": "draft_echo.md (`specdec campaign vllm_cpu --only echo`)",
}


def _git(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    except OSError:
        pytest.skip("no git here: the policy is about what git keeps")


def tracked() -> list[str]:
    run = _git("ls-files", "-z", "results")
    if run.returncode != 0:
        pytest.skip(f"not a git checkout ({run.stderr.strip()}): the policy is about what git keeps")
    return [p for p in run.stdout.split("\0") if p]


def misplaced_dumps(paths) -> list[str]:
    return sorted(p for p in paths if RESPONSE_DUMP.search(p) and p.rsplit("/", 1)[0] not in READ_BY_A_REPORT)


@pytest.mark.lint
def test_no_tracked_file_under_results_is_over_the_size_limit():
    paths = tracked()
    assert len(paths) > 100  # the scan sees the folder
    big = {p: (ROOT / p).stat().st_size for p in paths if (ROOT / p).is_file()}
    assert {p: n for p, n in big.items() if n > MAX_BYTES} == {}, "results/README.md: a record this large is a dump"


@pytest.mark.lint
def test_response_dumps_are_tracked_only_where_a_report_is_written_from_them():
    paths = tracked()
    assert misplaced_dumps(paths) == [], "git rm --cached them: results/README.md, 'What git keeps'"
    for folder in READ_BY_A_REPORT:  # each exception is still needed
        assert any(p.startswith(folder + "/") and RESPONSE_DUMP.search(p) for p in paths), folder


@pytest.mark.lint
def test_git_ignores_a_new_response_dump_outside_those_folders():
    planted = ["results/findings/llamacpp/responses/engine-0123456789abcdef.jsonl",
               "results/structured/engine/vllm-off/engine-0123456789abcdef.jsonl",
               "results/some-new-campaign/engine-0123456789abcdef.jsonl"]
    kept = [f"{folder}/engine-0123456789abcdef.jsonl" for folder in READ_BY_A_REPORT]
    kept.append("results/engines/engine-stops.jsonl")  # a record of its own, not a dump
    run = _git("check-ignore", "--no-index", *planted, *kept)
    assert run.returncode in (0, 1), run.stderr
    assert sorted(run.stdout.split()) == sorted(planted)


@pytest.mark.lint
def test_the_scan_finds_a_misplaced_dump_and_spares_the_rest():
    assert misplaced_dumps(["results/a/responses/engine-0123456789abcdef.jsonl",
                            "results/findings/vllm-cpu/responses/engine-0123456789abcdef.jsonl",
                            "results/engines/engine-stops.jsonl", "results/a/journal.jsonl"]) == [
        "results/a/responses/engine-0123456789abcdef.jsonl"]
