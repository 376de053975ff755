"""The shipped prompt catalogue (suites/prompts/bench.jsonl): Spec-Bench's six subtasks, ≥ 20 prompts each."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources

import pytest

from suites import http_bench

SIX = ("chat", "translation", "summarization", "qa", "math", "rag")
# ids that rows in results/ refer to (the first catalogue): they stay, under the same category
FIRST = {"chat-weekend": "chat", "chat-plants": "chat", "translation-fr": "translation", "translation-de": "translation",
         "summarization-river": "summarization", "summarization-meeting": "summarization", "qa-capital": "qa",
         "qa-photosynthesis": "qa", "math-apples": "math", "math-train": "math", "rag-library": "rag",
         "rag-recipe": "rag", "code-fizzbuzz": "code", "code-reverse": "code"}


def _rows() -> list[dict]:
    text = resources.files("suites").joinpath("prompts", "bench.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_six_spec_bench_subtasks_with_at_least_20_prompts_each():
    counts = Counter(r["category"] for r in _rows())
    assert set(SIX) == set(http_bench.SPEC_BENCH)
    assert all(counts[c] >= 20 for c in SIX), counts
    assert set(counts) <= set(http_bench.CATEGORIES)


def test_ids_unique_texts_non_empty_and_every_row_complete():
    rows = _rows()
    assert all(set(r) == {"id", "category", "text"} for r in rows)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))
    assert all(r["text"].strip() and r["id"].strip() for r in rows)
    assert len({r["text"] for r in rows}) == len(rows)


def test_the_first_catalogue_keeps_its_ids_and_comes_first_in_each_category():
    rows = _rows()
    assert {r["id"]: r["category"] for r in rows if r["id"] in FIRST} == FIRST
    firsts = http_bench.catalogue(per_category=2)
    assert {r["id"] for r in firsts} == set(FIRST)


@pytest.mark.parametrize("category", ["summarization", "rag"])
def test_copy_categories_carry_a_source_passage(category):
    """Prompt-lookup drafting pays when the answer can copy from the prompt: a passage of 20 words or more."""
    for r in http_bench.catalogue((category,)):
        source = r["text"].split(":", 1)[1].split("\nQuestion:")[0].split("\nSummary:")[0]
        assert len(source.split()) >= 20, r["id"]


def test_code_edit_prompts_carry_the_code_the_answer_repeats_and_are_sent_only_when_named():
    """Each ends with the heading the answer follows (`After:` / `JSON:`) after at least 5 lines of source; the default
    catalogue (no category named) leaves them out, so `--prompts 2` is still the first catalogue."""
    edits = http_bench.catalogue(("code-edit",))
    assert len(edits) >= 8
    for r in edits:
        source, heading = r["text"].rstrip("\n").rsplit("\n", 1)
        assert heading in ("After:", "JSON:") and len(source.split("\n\n", 1)[1].splitlines()) >= 5, r["id"]
    assert not any(r["category"] == "code-edit" for r in http_bench.catalogue())


def test_chat_prompts_are_conversations_ending_with_the_assistant_turn():
    chats = http_bench.catalogue(("chat",))
    assert all(r["text"].startswith("User:") and r["text"].endswith("Assistant:") for r in chats)
    assert sum(r["text"].count("User:") >= 2 for r in chats) >= 18  # multi-turn, MT-bench style


def test_the_readme_states_the_licence():
    readme = resources.files("suites").joinpath("prompts", "README.md").read_text(encoding="utf-8")
    assert "Apache-2.0" in readme and "bench.jsonl" in readme
