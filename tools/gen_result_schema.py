"""Write docs/schema/result.schema.json from harness.envelope's dataclasses (tests/test_envelope.py checks that
the committed file is what this writes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.envelope import SCHEMA_PATH, json_schema  # noqa: E402


def render() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


if __name__ == "__main__":
    (ROOT / SCHEMA_PATH).write_text(render(), encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
