"""Config dataclasses that build their own command-line flags (one source of truth for every default).

A field declared with `option(default, "--flag", "help", parse)` carries its flag, help text and
parser in its metadata; `add_arguments` turns the fields of a dataclass into argparse flags and
`from_args` builds the dataclass back from the parsed namespace. `BenchConfig` (specdec bench) and
`CheckConfig` (specdec verify, the pytest plugin) are both written this way, so the CLI, the plugin
and the Python API can never disagree on a default.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from harness.errors import HarnessError


def option(default: Any, flag: str | None, help: str, parse: Callable[[str], Any] | None = None,
           metavar: str | None = None, action: str | None = None, choices: tuple | None = None,
           aliases: tuple[str, ...] = (), group: str | None = None) -> Any:
    """A dataclass field with its command-line flag (flag None: Python API only, no flag); `group` names the
    --help section it is listed in."""
    return dataclasses.field(default=default, metadata={"flag": flag, "help": help, "parse": parse,
                                                        "metavar": metavar, "action": action,
                                                        "choices": choices, "aliases": aliases, "group": group})


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse reports ValueError/ArgumentTypeError as usage errors; HarnessError would escape it."""

    def convert(text: str):
        try:
            return parse(text)
        except HarnessError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def cli_fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("flag")]


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls,
                  defaults: dict[str, Any] | None = None) -> None:
    """One flag per field of `cls` that declares one; `defaults` overrides a field's default for this parser.
    Fields that name a `group` are listed under that heading of --help (groups in the order they first appear)."""
    groups: dict[str, Any] = {}
    for field in cli_fields(cls):
        meta = field.metadata
        target = parser
        if meta.get("group") and hasattr(parser, "add_argument_group"):
            if meta["group"] not in groups:
                groups[meta["group"]] = parser.add_argument_group(meta["group"])
            target = groups[meta["group"]]
        default = (defaults or {}).get(field.name, field.default)
        kwargs: dict[str, Any] = {"dest": field.name, "help": meta["help"], "default": default}
        if meta["action"]:
            kwargs["action"] = meta["action"]
        else:
            kwargs["metavar"] = meta["metavar"]
            if meta["parse"] is not None:
                kwargs["type"] = _argparse_type(meta["parse"])
            if meta["choices"]:
                kwargs["choices"] = meta["choices"]
        target.add_argument(meta["flag"], *meta["aliases"], **kwargs)


def from_args(cls, args: argparse.Namespace, **extra):
    """Build `cls` from a namespace filled by `add_arguments` (plus `extra` fields that have no flag)."""
    values = {f.name: getattr(args, f.name) for f in cli_fields(cls) if hasattr(args, f.name)}
    return cls(**values, **extra)
