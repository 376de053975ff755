"""The policy seen from the mechanism: a registry that knows no package name (issue 56, item 2).

The mechanism (harness) runs catalogues, an outputs table, campaigns, bench suites and the HTTP bench's prompt
catalogue that it does not own: the composition layer hands them over as a `Policy` (`install(policy)`), a table of
names -> loaders. The accessors below (`catalogue`, `results_folder`, `load`, `names`) look a name up in what was
installed; nothing here imports, or names, the package that holds them (import-linter: harness imports nothing
from suites; tests/test_policy_injection.py: no module name of it in harness/ either).

When nothing was installed explicitly (`python -m harness`, a test that imports a harness module, a worker
subprocess), the policy is the one the installed distribution declares in the entry-point group
`ENTRY_POINT_GROUP` (pyproject.toml: [project.entry-points."specdec.policy"]); with none, a call is a HarnessError
(exit 2, one line) that names what was asked for."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from harness.errors import HarnessError

ENTRY_POINT_GROUP = "specdec.policy"  # where an installed distribution declares its Policy object


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the composition layer passes the mechanism.

    `modules`: name -> a loader, called on each use (so a heavy campaign loads only when run). The names the
    harness asks for: "catalogues.NAME" (the cases, settings, sizes, prompts and pairs a check runs when the user
    names none), "outputs" (FOLDERS: the results/ folder of each command), "campaigns.NAME" (a campaign; names
    without a leading "_" are what `specdec campaign` lists), "sweeps" (registers the bench suites on load),
    "http_bench" (the HTTP bench's prompt catalogue). `source` names the policy in messages."""

    modules: Mapping[str, Callable[[], Any]]
    source: str = "the installed policy"


_installed: Policy | None = None


def install(policy: Policy | None) -> Policy | None:
    """Make `policy` what every accessor sees (None: nothing installed); returns the one it replaces."""
    global _installed
    if policy is not None and not isinstance(policy, Policy):
        raise HarnessError(f"harness.policy.install takes a Policy, got {type(policy).__name__}")
    previous, _installed = _installed, policy
    return previous


def installed() -> Policy | None:
    """The policy installed explicitly or already taken from the entry point; None before either."""
    return _installed


def current(asked: str = "the policy") -> Policy:
    """The installed policy; else the one the installed distribution declares (taken once); else HarnessError."""
    if _installed is None:
        install(_declared(asked))
    assert _installed is not None
    return _installed


def _declared(asked: str) -> Policy:
    from importlib.metadata import entry_points

    found = list(entry_points(group=ENTRY_POINT_GROUP))
    if not found:
        raise HarnessError(f"no policy installed, so no {asked}: run `specdec` (or `python -m specdec`, or `import "
                           f"specdec` first), or install one with harness.policy.install(Policy(...)) (no entry "
                           f"point in group {ENTRY_POINT_GROUP!r} here: is the project installed? `pip install -e .`)")
    if len(found) > 1:
        raise HarnessError(f"{len(found)} policies declared in entry-point group {ENTRY_POINT_GROUP!r} "
                           f"({', '.join(sorted(e.value for e in found))}): install one with harness.policy.install")
    policy = found[0].load()
    if not isinstance(policy, Policy):
        raise HarnessError(f"entry point {found[0].value} (group {ENTRY_POINT_GROUP!r}) is a "
                           f"{type(policy).__name__}, not a harness.policy.Policy")
    return policy


def load(name: str, what: str = "policy module"):
    """The policy's module `name` (e.g. "campaigns.zoo", "http_bench"); one it lacks is a HarnessError (exit 2)."""
    policy = current(f"{what} {name!r}")
    loader = policy.modules.get(name)
    if loader is None:
        group = name.rpartition(".")[0]
        known = sorted(n for n in policy.modules if n.rpartition(".")[0] == group)
        raise HarnessError(f"unknown {what} {name!r}: {policy.source} has none"
                           + (f" (it has {', '.join(known)})" if known else ""))
    return loader()


def catalogue(name: str):
    """The policy's catalogue NAME: the cases, settings or prompts a check runs when the user names none."""
    return load(f"catalogues.{name}", "catalogue")


def results_folder(command: str) -> str:
    """The results/ folder `specdec COMMAND` writes to without --out (the policy's outputs table)."""
    folders = load("outputs", "outputs table").FOLDERS
    if command not in folders:
        raise HarnessError(f"the outputs table of {current().source} has no folder for {command!r}")
    return folders[command]


def names(group: str) -> list[str]:
    """The names the policy has under `group` ("campaigns" -> ["_commands", "demo", ...]), sorted."""
    return sorted(n.removeprefix(f"{group}.") for n in current(f"{group} list").modules if n.startswith(f"{group}."))
