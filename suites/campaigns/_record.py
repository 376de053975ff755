"""The hand-written part a generated findings report ends with: OUT/public-record.md.

A findings report names the upstream issues and pull requests of what it found (searched for, cited with number,
title, state and date; "new" only where none was found, with what was searched), and docs/BUGS.md and the README
say the same. That text is not measured, so it does not come from a run's records. It lives beside the report as
OUT/public-record.md, and a producer that writes the report from its records appends it verbatim. Regenerating the
report keeps the text, and the text is edited in one place. The architectures campaign does the same with its
OUT/notes.md.
"""

from __future__ import annotations

from pathlib import Path

PUBLIC_RECORD = "public-record.md"


def public_record(out: str | Path) -> str:
    """What a generated report appends: a blank line and OUT/public-record.md, or '' where the folder has none."""
    path = Path(out) / PUBLIC_RECORD
    return "\n" + path.read_text() if path.is_file() else ""
