"""suites.campaigns._record: the public record a generated findings report ends with, and the committed findings
pages that must carry one (issue 57: every finding beside its public record)."""

from __future__ import annotations

from pathlib import Path

import pytest

from suites.campaigns._record import PUBLIC_RECORD, public_record

ROOT = Path(__file__).resolve().parents[2]

# The reports a producer writes from its records (report file, folder), each ending with OUT/public-record.md.
GENERATED = [("results/findings/llama-server", "README.md"), ("results/findings/llamacpp", "report.md"),
             ("results/structured", "README.md")]
# Every findings page, generated or hand-written; each must name its public record or say none was found.
PAGES = ["results/findings/README.md", "results/findings/vllm-cpu/README.md", "results/findings/api-semantics/README.md",
         "results/findings/architectures/README.md", "results/findings/sglang/README.md",
         *(f"{folder}/{name}" for folder, name in GENERATED)]


def test_public_record_is_the_folder_file_after_a_blank_line_or_nothing(tmp_path):
    assert public_record(tmp_path) == ""
    (tmp_path / PUBLIC_RECORD).write_text("## Public record\n\n- x #1 (open).\n")
    assert public_record(tmp_path) == "\n## Public record\n\n- x #1 (open).\n"
    assert public_record(str(tmp_path)) == public_record(tmp_path)


def test_the_structured_readme_ends_with_its_public_record(tmp_path):
    """A producer appends the hand-written file verbatim; without one its report is unchanged."""
    from suites.campaigns.structured import readme

    bare = readme(tmp_path)
    (tmp_path / PUBLIC_RECORD).write_text("## Public record\n\nnone found.\n")
    assert readme(tmp_path) == bare + "\n## Public record\n\nnone found.\n"


@pytest.mark.parametrize("folder, name", GENERATED)
def test_each_committed_generated_report_ends_with_its_folders_public_record(folder, name):
    """The record is edited in OUT/public-record.md only: the committed report carries exactly that text."""
    record = (ROOT / folder / PUBLIC_RECORD).read_text()
    assert record.startswith("## Public record\n")
    assert (ROOT / folder / name).read_text().endswith("\n" + record)


@pytest.mark.parametrize("page", PAGES)
def test_every_findings_page_has_a_public_record_section(page):
    text = (ROOT / page).read_text()
    assert "\n## Public record\n" in text
    section = text.split("\n## Public record\n", 1)[1]
    assert "#" in section.split("\n## ", 1)[0]  # it cites numbers (a "none found" section cites what it searched)
