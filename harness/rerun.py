"""`specdec run --config FILE`: run again what a result file records (docs/RESULTS-FORMAT.md).

FILE is a result envelope, or any JSON object with its `kind` and `config`. The kinds that rerun:

- `check` (`specdec verify --json`) at the sampler and generation levels: the recorded `CheckConfig`; at the
  engine level (`"level": "engine"`): the recorded `EngineConfig` (endpoint, served implementation, sampling
  settings and every other field), against the endpoint it names;
- `campaign.NAME` for a campaign built on the campaign runner (harness.runner): its recorded `Config`, run as
  `specdec campaign NAME` with the flags that differ from their defaults;
- `bench` (`specdec bench`): its recorded `BenchConfig`, written to `--out` (default: the policy's bench folder,
  never the recorded folder, so a rerun does not overwrite the result it was read from).

A configuration that was never recorded (results converted from the earlier formats carry
`{"not_recorded": ...}`) or a kind not listed is a usage error (exit 2), never a guess.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

from harness.configs import option
from harness.errors import HarnessError

NOT_RECORDED_KEY = "not_recorded"  # a converted result's config: what is missing from it


@dataclasses.dataclass
class RunOptions:
    """`specdec run`'s options."""

    config: str | None = option(None, "--config", "a result file (a result envelope), or a JSON object with its "
                                "kind and config, to run again", metavar="PATH")
    out: str | None = option(None, "--out", "where the rerun writes: a check's JSON report (default: none), a "
                             "campaign's folder (default: the campaign's)", metavar="PATH")
    dry_run: bool = option(False, "--dry-run", "run nothing: check that the recorded config would run (the usage "
                           "checks a run makes before its first cell or request; exit 2 in one line if not) and "
                           "print what would run", action="store_true")


def load(path: str | None) -> tuple[str, dict[str, Any]]:
    """(kind, config) of a result file; HarnessError where it has none that can run."""
    if not path:
        raise HarnessError("specdec run needs --config PATH (a result file, docs/RESULTS-FORMAT.md)")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HarnessError(f"--config {path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or not isinstance(data.get("config"), dict):
        raise HarnessError(f"--config {path}: no kind and config (a result envelope has both)")
    if NOT_RECORDED_KEY in data["config"]:
        raise HarnessError(f"--config {path}: the run's configuration was not recorded "
                           f"({data['config'][NOT_RECORDED_KEY]}): nothing to rerun")
    return data["kind"], data["config"]


def _build(cls, config: dict[str, Any]):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(config) - names)
    if unknown:
        raise HarnessError(f"the recorded config has fields {cls.__name__} does not know: {', '.join(unknown)}")
    return cls(**config)


def check_config(config: dict[str, Any]):
    """The configuration a check report recorded: a CheckConfig (sampler and generation levels), or the
    EngineConfig of an engine-level report (`"level": "engine"`)."""
    from harness.check.config import CheckConfig

    if config.get("level") == "engine":
        return engine_config(config)
    return _build(CheckConfig, config)


def engine_config(config: dict[str, Any]):
    """The EngineConfig an engine-level report recorded. JSON lists become the tuples the fields hold, and each
    sampling setting is rebuilt from its recorded parameters."""
    from harness.served.config import EngineConfig

    fields = {k: v for k, v in config.items() if k != "level"}
    if "endpoint" not in fields:  # recorded before the report kept its EngineConfig: the driver's settings only
        raise HarnessError("the recorded engine-level config has no endpoint (an older report: it kept the check "
                           "driver's settings only): rerun its specdec verify --level engine command")
    for name, value in fields.items():
        if name == "settings" and isinstance(value, list):
            fields[name] = tuple(_setting(s) for s in value)
        elif isinstance(value, list):
            fields[name] = tuple(value)
    return _build(EngineConfig, fields)


def _setting(recorded: Any):
    """One recorded sampling setting (the fields of harness.check.settings.Setting) as a Setting."""
    from harness.check.settings import Setting

    names = {f.name for f in dataclasses.fields(Setting)}
    if not isinstance(recorded, dict) or set(recorded) - names:
        raise HarnessError(f"a recorded sampling setting is not one: {recorded!r}")
    if recorded.get("constraint") is not None:
        raise HarnessError("a recorded sampling setting has a constraint (structured output), which is recorded "
                           "as its parts and cannot be rebuilt: rerun its specdec verify --level engine command")
    fields = dict(recorded)
    if fields.get("logit_bias") is not None:
        fields["logit_bias"] = tuple((int(i), float(b)) for i, b in fields["logit_bias"])
    return Setting(**fields)


def campaign_argv(name: str, config: dict[str, Any], out: str | None) -> list[str]:
    """The `specdec campaign NAME` arguments that rerun a campaign built on the runner with `config`."""
    from harness.policy import load as load_policy
    from harness.runner import command_line, is_campaign

    module = load_policy(f"campaigns.{name}", "campaign")
    if not is_campaign(module):
        raise HarnessError(f"campaign {name} is not a campaign (its Config, cells, run_cell and report)")
    argv = shlex.split(command_line(name, _build(module.Config, config)))[3:]
    return argv + (["--out", out] if out else [])


def campaign_dry_run(name: str, argv: list[str]) -> str:
    """What `specdec campaign NAME ARGV` would run, after the checks the runner makes before its first cell (the
    flags parse, the campaign's `validate`); HarnessError where they fail."""
    from harness.policy import load as load_policy
    from harness.runner import campaign_config, parser_for

    module = load_policy(f"campaigns.{name}", "campaign")
    config = campaign_config(name, module, parser_for(name, module).parse_args(argv))
    if hasattr(module, "validate"):
        module.validate(config)
    return shlex.join(["specdec", "campaign", name, *argv])


def bench_config(config: dict[str, Any], out: str | None):
    """The BenchConfig a bench result recorded (JSON lists -> tuples), writing to `out` (default: the policy's bench
    folder), validated."""
    from harness.bench.config import BenchConfig
    from harness.policy import results_folder

    missing = sorted({f.name for f in dataclasses.fields(BenchConfig)} - set(config))
    if missing:  # a bench result records every field; a partial one would run the default suite in their place
        raise HarnessError(f"the recorded bench config lacks {', '.join(missing)}: not the config of a bench result")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
    return _build(BenchConfig, {**fields, "out": out or results_folder("bench")}).validate()
