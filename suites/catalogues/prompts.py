"""The prompt set of the real-model pairs (suites/prompts/prompts.jsonl; see suites/prompts/README.md),
read by harness.prompts.load_prompts through harness.policy."""

from __future__ import annotations

from importlib import resources


def text() -> str:
    """The prompt set as JSON lines (one object per prompt: id, kind, text)."""
    return resources.files("suites").joinpath("prompts", "prompts.jsonl").read_text(encoding="utf-8")
