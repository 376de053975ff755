"""The composition: the default policy (suites/) handed to the mechanism (harness) as an argument.

`POLICY` is a harness.policy.Policy whose names are suites' catalogues ("catalogues.NAME"), campaigns
("campaigns.NAME"), its outputs table ("outputs"), bench suites ("sweeps") and HTTP-bench catalogue ("http_bench"),
each imported on first use. `install()` hands it to harness.policy; `import specdec` runs it, and so do the `specdec`
console script (specdec.cli) and `python -m specdec`, which import the package. pyproject.toml declares the same object in the entry-point group
"specdec.policy", which harness.policy reads when nothing was installed (`python -m harness`, the pytest plugin, a
test importing a harness module)."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import suites
import suites.campaigns
import suites.catalogues
from harness import policy as _mechanism

TOP_LEVEL = ("outputs", "sweeps", "http_bench")  # suites' modules the mechanism asks for by these names
GROUPS = (suites.catalogues, suites.campaigns)  # every module of these packages, as "catalogues.NAME" ...


def _loader(package: ModuleType, name: str):
    return lambda: importlib.import_module(f"{package.__name__}.{name}")


def build() -> _mechanism.Policy:
    """The table, from the modules that are there (a campaign added to suites/campaigns is in it)."""
    modules = {name: _loader(suites, name) for name in TOP_LEVEL}
    for package in GROUPS:
        group = package.__name__.rpartition(".")[2]
        for info in pkgutil.iter_modules(package.__path__):
            modules[f"{group}.{info.name}"] = _loader(package, info.name)
    return _mechanism.Policy(modules, source="specdec's default policy (suites)")


POLICY = build()


def install() -> None:
    """Hand POLICY to the mechanism unless a policy is installed already (a caller's own stays)."""
    if _mechanism.installed() is None:
        _mechanism.install(POLICY)
