"""One result format: every JSON file a command writes is an `Envelope` (docs/RESULTS-FORMAT.md).

    {"schema_version": 1, "kind": "check", "config": {...}, "provenance": {...}, "report": {...}, "summary": {...}}

- `kind` names what the body holds (`check`, `bench`, `numerics`, `mutants`, `campaign.NAME`, ...);
- `config` is what the run was asked to do (the config dataclass's fields, or a campaign's options): for the
  kinds `specdec run --config` knows, running it again reruns the run;
- `provenance` is the seven fields of docs/CONTRACT.md §3, every one present; a field a run never recorded
  (results converted from the earlier formats) reads `"not recorded"`, it is never guessed;
- the body is either `rows` (a list: one record per cell, run or measurement) or `report` (one object);
- `summary` is the few numbers and the verdict a reader wants first.

`write_result` is the only function that writes one; the JSON Schema of the envelope
(docs/schema/result.schema.json) is generated from these dataclasses by `json_schema()`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
NOT_RECORDED = "not recorded"  # a provenance field (or a configuration) the run did not record
KIND_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z0-9_-]+)*$"
SCHEMA_PATH = "docs/schema/result.schema.json"  # relative to the repository root


@dataclasses.dataclass
class Provenance:
    """docs/CONTRACT.md §3: every record carries these seven fields (`NOT_RECORDED` where a run did not)."""

    seed: int | list[int] | str | None  # None: nothing in the run is random (a fixed computation, a probe)
    git_commit: str
    machine: str
    versions: dict[str, str] | str
    device: str
    dtype: str
    utc_time: str

    @classmethod
    def of(cls, value: Provenance | dict) -> Provenance:
        """From `harness.records.provenance(...)`'s dict (or a Provenance); a missing field is an error."""
        if isinstance(value, Provenance):
            return value
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in value]
        extra = [k for k in value if k not in names]
        if missing or extra:
            raise ValueError(f"provenance: missing {missing}, unknown {extra} (docs/RESULTS-FORMAT.md)")
        return cls(**{n: value[n] for n in names})

    def __post_init__(self):
        seed = self.seed
        if not (seed is None or seed == NOT_RECORDED or (isinstance(seed, int) and not isinstance(seed, bool))
                or (isinstance(seed, list) and all(isinstance(s, int) for s in seed))):
            raise ValueError(f"provenance: seed must be an int, a list of ints, null or {NOT_RECORDED!r}, got {seed!r}")
        if not (self.versions == NOT_RECORDED or isinstance(self.versions, dict)):
            raise ValueError(f"provenance: versions must be a dict or {NOT_RECORDED!r}")
        for name in ("git_commit", "machine", "device", "dtype", "utc_time"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"provenance: {name} must be a string, got {getattr(self, name)!r}")


@dataclasses.dataclass
class Envelope:
    """A result file. Exactly one of `rows` and `report` is set."""

    kind: str
    config: dict[str, Any]
    provenance: Provenance
    summary: dict[str, Any]
    rows: list[Any] | None = None
    report: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self):
        if not re.match(KIND_PATTERN, self.kind):
            raise ValueError(f"kind {self.kind!r} does not match {KIND_PATTERN}")
        if (self.rows is None) == (self.report is None):
            raise ValueError("an envelope holds either rows or a report (exactly one)")
        self.provenance = Provenance.of(self.provenance)

    def to_dict(self) -> dict[str, Any]:
        out = {"schema_version": self.schema_version, "kind": self.kind, "config": self.config,
               "provenance": dataclasses.asdict(self.provenance)}
        out.update({"rows": self.rows} if self.rows is not None else {"report": self.report})
        out["summary"] = self.summary
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Envelope:
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"not a result envelope of schema_version {SCHEMA_VERSION} (docs/RESULTS-FORMAT.md)")
        return cls(kind=data["kind"], config=data["config"], provenance=Provenance.of(data["provenance"]),
                   summary=data["summary"], rows=data.get("rows"), report=data.get("report"),
                   schema_version=data["schema_version"])


def config_dict(config: Any) -> dict[str, Any]:
    """A run's configuration as plain JSON: a config dataclass's fields, an argparse namespace's options, or a
    dict. A callable (an implementation passed as a Python object) is written as MODULE:QUALNAME."""
    if config is None:
        return {}
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    elif isinstance(config, argparse.Namespace):
        values = dict(vars(config))
    elif isinstance(config, dict):
        values = dict(config)
    else:
        raise TypeError(f"config must be a dataclass, a namespace or a dict, got {type(config).__name__}")
    return {str(k): _plain(v) for k, v in values.items() if k != "func"}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_dict(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '?')}:{value.__qualname__}"
    return value


def write_result(path: str | os.PathLike, kind: str, *, config: Any, provenance: Provenance | dict,
                 rows: list | None = None, report: dict | None = None, summary: dict | None = None) -> Path:
    """Write one result envelope to `path` (atomically; numpy scalars become numbers, NaN/inf null).

    `config`: the config dataclass, argparse namespace or dict the run was asked with; `provenance`:
    `harness.records.provenance(...)`; exactly one of `rows` (a list) and `report` (a dict)."""
    from harness.records import atomic_write_json

    envelope = Envelope(kind=kind, config=config_dict(config), provenance=Provenance.of(provenance),
                        summary=dict(summary or {}), rows=None if rows is None else list(rows), report=report)
    return atomic_write_json(path, envelope.to_dict())


def read_result(path: str | os.PathLike) -> Envelope:
    """An envelope from disk (ValueError if the file is not one)."""
    import json

    return Envelope.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


# -- the JSON Schema, generated from the dataclasses -------------------------------------------------------


def _type_schema(tp: Any) -> dict:
    origin = typing.get_origin(tp)
    if tp is Any:
        return {}
    if origin in (typing.Union, getattr(types, "UnionType", None)):
        return {"anyOf": [_type_schema(a) for a in typing.get_args(tp)]}
    if tp is type(None):
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return {"type": "array", **({"items": _type_schema(item)} if item is not Any else {})}
    if origin is dict:
        _, value = typing.get_args(tp) or (str, Any)
        return {"type": "object", **({"additionalProperties": _type_schema(value)} if value is not Any else {})}
    if dataclasses.is_dataclass(tp):
        return {"$ref": f"#/$defs/{tp.__name__}"}
    raise TypeError(f"no JSON Schema for {tp!r}")


def _object_schema(cls, required: list[str]) -> dict:
    hints = typing.get_type_hints(cls)
    props = {f.name: _type_schema(hints[f.name]) for f in dataclasses.fields(cls)}
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of `Envelope`; docs/schema/result.schema.json is this, committed."""
    envelope = _object_schema(Envelope, ["schema_version", "kind", "config", "provenance", "summary"])
    # rows | report: exactly one; both null-free in a file
    envelope["properties"]["rows"] = {"type": "array"}
    envelope["properties"]["report"] = {"type": "object"}
    envelope["properties"]["schema_version"] = {"const": SCHEMA_VERSION}
    envelope["properties"]["kind"] = {"type": "string", "pattern": KIND_PATTERN}
    envelope["oneOf"] = [{"required": ["rows"]}, {"required": ["report"]}]
    order = ("schema_version", "kind", "config", "provenance", "rows", "report", "summary")
    envelope["properties"] = {name: envelope["properties"][name] for name in order}
    provenance = _object_schema(Provenance, [f.name for f in dataclasses.fields(Provenance)])
    provenance["properties"]["seed"]["anyOf"][2] = {"const": NOT_RECORDED}
    provenance["properties"]["versions"]["anyOf"][1] = {"const": NOT_RECORDED}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "specdec result envelope",
            "description": "Every JSON file a specdec command writes (docs/RESULTS-FORMAT.md); generated from "
                           "harness.envelope by tools/gen_result_schema.py",
            **envelope, "$defs": {"Provenance": provenance}}
