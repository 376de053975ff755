"""The prompt catalogue and defaults of `specdec bench --endpoint` (speedup of a served engine over HTTP).

Categories are Spec-Bench's six subtasks (`chat` = multi-turn conversation, `translation`,
`summarization`, `qa` = question answering, `math` = mathematical reasoning, `rag` = retrieval-augmented
generation), 20 prompts each, plus two `code` prompts kept from the first catalogue; written for this
project (`suites/prompts/bench.jsonl`, Apache-2.0, see suites/prompts/README.md), phrased as plain
completions so that base and instruct models alike continue them.
"""

from __future__ import annotations

import json
from importlib import resources

CATEGORIES = ("chat", "translation", "summarization", "qa", "math", "rag", "code", "code-edit")
# Sent when no category is named: all but code-edit (the answer repeats the prompt's code with one change, where prompt
# lookup drafts well; added later, named when wanted), so `--prompts 2` stays the catalogue earlier results ran
DEFAULT_CATEGORIES = tuple(c for c in CATEGORIES if c != "code-edit")
SPEC_BENCH = {"chat": "multi-turn conversation", "translation": "translation", "summarization": "summarization",
              "qa": "question answering", "math": "mathematical reasoning", "rag": "retrieval-augmented generation"}
CONCURRENCY = (1, 2, 4)
MAX_TOKENS = 64
QUICK = {"concurrency": (1, 2), "max_tokens": 8, "per_category": 1}  # what CI affords against the toy pair


def catalogue(categories: tuple[str, ...] | None = None, per_category: int | None = None) -> list[dict]:
    """[{id, category, text}] in file order (of DEFAULT_CATEGORIES when none is named); `per_category` keeps the first
    N of each category."""
    text = resources.files("suites").joinpath("prompts", "bench.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    unknown = sorted(set(categories or ()) - set(CATEGORIES))
    if unknown:
        from harness.errors import UnknownNameError

        raise UnknownNameError("prompt category", unknown[0], list(CATEGORIES))
    out, seen = [], {}
    for row in rows:
        if row["category"] not in (categories or DEFAULT_CATEGORIES):
            continue
        seen[row["category"]] = seen.get(row["category"], 0) + 1
        if per_category is None or seen[row["category"]] <= per_category:
            out.append(row)
    return out
