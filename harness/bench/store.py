"""`rows.jsonl`: one raw record per finished cell, keyed by cell id; what makes a sweep resumable.

Each append rewrites the file through a temporary file and a rename (harness.records), so an
interrupted run leaves either the old file or the new one, never half a line. A rerun loads the
finished ids and measures only the rest.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.records import atomic_write_text, json_safe


class RowStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""

    def load(self) -> dict[str, dict]:
        """cell id -> record, the last record winning when a cell was measured twice (--no-resume)."""
        records = {}
        for line in self._text.splitlines():
            if line.strip():
                record = json.loads(line)
                records[record["cell_id"]] = record
        return records

    def append(self, record: dict) -> None:
        line = json.dumps(json_safe(record), allow_nan=False, sort_keys=True)
        self._text += line + "\n"
        atomic_write_text(self.path, self._text)
