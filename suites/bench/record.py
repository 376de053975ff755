"""Writes results/bench/benchmarks.json for `nox -s benchmarks`: pytest-benchmark's own JSON record as a result
envelope (harness.bench.pytest_record.envelope_of).

    python -m suites.bench.record RAW.json OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.bench.pytest_record import envelope_of
from harness.envelope import write_result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m suites.bench.record RAW.json OUT.json", file=sys.stderr)
        return 2
    envelope = envelope_of(json.loads(Path(args[0]).read_text(encoding="utf-8")), {"source": "pytest --benchmark-json"})
    write_result(args[1], envelope.kind, config=envelope.config, provenance=envelope.provenance, rows=envelope.rows,
                 summary=envelope.summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
