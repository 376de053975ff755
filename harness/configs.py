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
           aliases: tuple[str, ...] = (), group: str | None = None, nargs: str | int | None = None,
           hidden: bool = False, required: bool = False) -> Any:
    """A dataclass field with its command-line flag (flag None: Python API only, no flag); `group` names the
    --help section it is listed in; `nargs` as argparse's ("+": one or more values, a list); `hidden`: a flag for
    tests, left out of --help. A mutable default (a list, a dict) is copied for every instance."""
    metadata = {"flag": flag, "help": help, "parse": parse, "metavar": metavar, "action": action, "choices": choices,
                "aliases": aliases, "group": group, "nargs": nargs, "hidden": hidden, "required": required}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse reports ValueError/ArgumentTypeError as usage errors; HarnessError would escape it."""

    def convert(text: str):
        try:
            return parse(text)
        except HarnessError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), like every other error of specdec."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def cli_fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("flag")]


def field_default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls,
                  defaults: dict[str, Any] | None = None, skip: tuple[str, ...] = ()) -> None:
    """One flag per field of `cls` that declares one; `defaults` overrides a field's default for this parser.
    Fields that name a `group` are listed under that heading of --help (groups in the order they first appear,
    shared with the groups of an earlier config on the same parser). Every action made here records the field it
    comes from (`action.config_field`, "Class.field"): `undeclared_flags` finds the flags written by hand."""
    groups: dict[str, Any] = {g.title: g for g in getattr(parser, "_action_groups", ())}
    for field in cli_fields(cls):
        if field.name in skip:  # no flag: the field keeps its default (`from_args` reads it from the namespace)
            parser.set_defaults(**{field.name: field_default(field)})
            continue
        meta = field.metadata
        target = parser
        if meta.get("group") and hasattr(parser, "add_argument_group"):
            if meta["group"] not in groups:
                groups[meta["group"]] = parser.add_argument_group(meta["group"])
            target = groups[meta["group"]]
        default = (defaults or {}).get(field.name, field_default(field))
        kwargs: dict[str, Any] = {"dest": field.name, "default": default,
                                  "help": argparse.SUPPRESS if meta.get("hidden") else meta["help"]}
        if meta["action"]:
            kwargs["action"] = meta["action"]
        if meta.get("required"):
            kwargs["required"] = True
        if meta["action"] not in ("store_true", "store_false"):
            kwargs["metavar"] = meta["metavar"]
            if meta["parse"] is not None:
                kwargs["type"] = _argparse_type(meta["parse"])
            if meta["choices"]:  # a callable: the choices are computed when the parser is built (a heavy module)
                kwargs["choices"] = meta["choices"]() if callable(meta["choices"]) else meta["choices"]
            if meta.get("nargs") is not None:
                kwargs["nargs"] = meta["nargs"]
        action = target.add_argument(meta["flag"], *meta["aliases"], **kwargs)
        action.config_field = f"{cls.__name__}.{field.name}"


def from_args(cls, args: argparse.Namespace, **extra):
    """Build `cls` from a namespace filled by `add_arguments` (plus `extra` fields that have no flag)."""
    values = {f.name: getattr(args, f.name) for f in cli_fields(cls) if hasattr(args, f.name)}
    return cls(**{**values, **extra})


def given(cls, args: argparse.Namespace, names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The fields of `cls` (or only `names`) that `args` sets to something other than None: building `cls` from
    them leaves every other field at `cls`'s own default (a flag declared by another config, whose default is
    None, "not given", does not restate this config's default)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    return {name: getattr(args, name) for name in (names or sorted(fields))
            if name in fields and getattr(args, name, None) is not None}


def undeclared_flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag of `parser` and of its subcommands that no config field declares (added by its own
    `add_argument` call, not by `add_arguments`): "PROG FLAG" each. --help and --version are argparse's own."""
    found: list[str] = []
    seen: set[int] = set()

    def walk(p: argparse.ArgumentParser) -> None:
        if id(p) in seen:
            return
        seen.add(id(p))
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)
            elif action.option_strings and not isinstance(action, (argparse._HelpAction, argparse._VersionAction)) \
                    and not getattr(action, "config_field", None):
                found.append(f"{p.prog} {action.option_strings[0]}")

    walk(parser)
    return found


@dataclasses.dataclass
class ThreadsOption:
    """--threads, on every command that runs torch work in this process."""

    threads: int | None = option(None, "--threads", "torch CPU threads (default: torch's own choice)", int, "N")
