"""Command line: `specdec` (also `python -m harness`). Only this module prints.

Exit codes (shared/CONTRACT.md §2): 0 success / all tests pass, 1 a test rejects losslessness
(or a mutant escaped), 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import sys

from harness.errors import HarnessError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _cmd_pairs(args) -> int:
    from harness.pairs import list_pairs

    rows = list_pairs()
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        status = "available" if r["available"] else f"not available: {r['note']}"
        print(f"{r['name']:<{width}}  {status:<12}  {r['description']}")
    print("\nBring your own pair: --target NAME_OR_PATH --draft NAME_OR_PATH (any two causal LMs, same tokenizer)")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pairs", help="list registered model pairs and whether each is available here")
    p.set_defaults(func=_cmd_pairs)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except HarnessError as exc:
        print(f"specdec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("specdec: interrupted (results written so far are kept)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
