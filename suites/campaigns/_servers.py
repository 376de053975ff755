"""Servers a campaign's cells run against, each started the first time a cell asks for it.

The campaigns that hold engine servers (llamacpp, llama_server, vllm_cpu) run their measurements as cells of the
campaign runner (harness.runner) in this process; a cell journaled by an earlier run is not run again, so a server
is only started when a cell that needs it is about to run: a resumed, complete run starts none.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

# The served engines' sampling prompts: one that invites copying (n-gram / prompt-lookup drafters propose
# and get drafts accepted) while its continuations stay open, and one open prompt.
COPY_PROMPT = ("Repeat this list exactly, five times, separated by commas: red apple, green pear, "
               "yellow banana, red apple, green pear, yellow banana")
OPEN_PROMPT = "Write one sentence about a cat."
# Every engine-level sampling cell a campaign runs is judged at this bar (`--inconclusive-tv`): a passing cell whose
# detectable TV is above it is INCONCLUSIVE, never PASS.
ENGINE_TV_BAR = 0.05


class Servers:
    """`servers[name]`: what `start[name]()` (a context manager) yields, entered on first use; all stopped at exit."""

    def __init__(self, **start: Callable[[], contextlib.AbstractContextManager]):
        self._start, self._up, self._stack = start, {}, contextlib.ExitStack()

    def __getitem__(self, name: str) -> Any:
        if name not in self._up:
            self._up[name] = self._stack.enter_context(self._start[name]())
        return self._up[name]

    @property
    def started(self) -> list[str]:
        return list(self._up)

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc) -> bool | None:
        return self._stack.__exit__(*exc)


def plain(record: Any) -> Any:
    """A cell's record as the journal gives it back (JSON, keys sorted): a first run's report and a resumed
    run's are then written from the same values."""
    return json.loads(json.dumps(record, sort_keys=True, default=str))


def not_run(cells, done: dict) -> list[str]:
    """The keys of `cells` (in order) that have no result: cut short by --stop-at / --budget-s."""
    return [k for k in cells if k not in done]


def not_run_lines(keys: list[str]) -> list[str]:
    """The report's paragraph for cells cut short (none: no lines)."""
    if not keys:
        return []
    return [f"**Not run** ({len(keys)} cells: the time limit came first; a rerun with the same `--out` runs only "
            "these): " + ", ".join(f"`{k}`" for k in keys) + ".", ""]
