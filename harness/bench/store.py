"""`rows.jsonl`: one raw record per finished cell, keyed by cell id; what makes a sweep resumable.

Each append rewrites the file through a temporary file and a rename (harness.records), so an
interrupted run leaves either the old file or the new one, never half a line. A rerun resumes only
what is provably this code on this computer: a record counts as finished when its cell id (a hash
of the cell's whole configuration) is in the plan AND it was measured at the current git commit
(uncommitted changes included, see records.git_commit) on the current machine. Anything else —
results committed from another computer, an older commit — is measured again, never borrowed.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.records import atomic_write_text, git_commit, json_safe, machine


def foreign_reason(record: dict) -> str | None:
    """Why `record` may not be resumed by this run (None: it may)."""
    prov = record.get("provenance") or {}
    commit, here = prov.get("git_commit"), git_commit()
    if commit in (None, "unknown") or here == "unknown":
        return "its git commit is unknown"
    if commit != here:
        return f"it was measured at commit {commit[:12]}, this is {here[:12]}"
    if prov.get("machine") != machine():
        return f"it was measured on {prov.get('machine') or 'an unrecorded machine'}, this is {machine()}"
    return None


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

    def resumable(self) -> tuple[dict[str, dict], dict[str, str]]:
        """(cell id -> record this run may resume, cell id -> why each other record may not)."""
        ok, foreign = {}, {}
        for cell_id, record in self.load().items():
            reason = foreign_reason(record)
            if reason is None:
                ok[cell_id] = record
            else:
                foreign[cell_id] = reason
        return ok, foreign

    def append(self, record: dict) -> None:
        line = json.dumps(json_safe(record), allow_nan=False, sort_keys=True)
        self._text += line + "\n"
        atomic_write_text(self.path, self._text)
