"""Structured outputs over the wire: the request fields engines take a constraint under, both ways.

Read by `specdec serve` (compiled with the same llguidance wrapper as the reference, for the served pair's
tokenizer: harness.check.structured) and written by the engine-level check. The names (facts about the
public APIs, no code of theirs):

- OpenAI: `response_format` = {"type": "json_schema", "json_schema": {"schema": S}} | {"type": "json_object"};
- vLLM: `structured_outputs` = {"json": S} | {"regex": R} | {"grammar": G} | {"choice": [...]}, and the older
  `guided_json` / `guided_regex` / `guided_grammar` / `guided_choice`;
- llama.cpp server: `json_schema` = S, `grammar` = GBNF text (llguidance converts it to Lark);
- SGLang: `regex` = R, `json_schema` = S (string), `ebnf` = grammar text.

A grammar is given to llguidance as Lark, GBNF or EBNF converted by `llguidance.gbnf_to_lark.any_to_lark`.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

from harness.check.structured import ConstraintSpec
from harness.errors import HarnessError
from harness.served.client import CONSTRAINT_FIELDS, EngineClient
from harness.served.llama_server import LlamaServerClient

NAMES = CONSTRAINT_FIELDS


def _schema(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _grammar(text) -> ConstraintSpec:
    if not isinstance(text, str) or not text.strip():
        raise HarnessError("a grammar must be a non-empty string (Lark, GBNF or EBNF)")
    from llguidance.gbnf_to_lark import any_to_lark

    try:
        return ConstraintSpec("lark", any_to_lark(text))
    except Exception as exc:  # the converter raises plain exceptions on syntax errors
        raise HarnessError(f"grammar cannot be read: {' '.join(str(exc).split())[:200]}") from None


def _choice(options) -> ConstraintSpec:
    if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
        raise HarnessError("a choice constraint must be a non-empty list of strings")
    return ConstraintSpec("regex", "|".join(f"({re.escape(o)})" for o in options))


def _from_response_format(value) -> ConstraintSpec | None:
    if not isinstance(value, dict):
        raise HarnessError("response_format must be an object")
    kind = value.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return ConstraintSpec("json_schema", '{"type": "object"}')
    if kind == "json_schema":
        inner = value.get("json_schema") or {}
        schema = inner.get("schema", value.get("schema")) if isinstance(inner, dict) else None
        if schema is None:
            raise HarnessError("response_format json_schema needs json_schema.schema")
        return ConstraintSpec("json_schema", _schema(schema))
    raise HarnessError(f"response_format type {kind!r} is not one of text, json_object, json_schema")


def _from_structured_outputs(value) -> ConstraintSpec:
    if not isinstance(value, dict):
        raise HarnessError("structured_outputs must be an object")
    given = [k for k in ("json", "regex", "grammar", "choice") if value.get(k) is not None]
    if len(given) != 1:
        raise HarnessError(f"structured_outputs needs exactly one of json, regex, grammar, choice (got {given})")
    key = given[0]
    return {"json": lambda v: ConstraintSpec("json_schema", _schema(v)), "regex": lambda v: ConstraintSpec("regex", v),
            "grammar": _grammar, "choice": _choice}[key](value[key])


def request_constraint(body: dict) -> tuple[str, ConstraintSpec] | None:
    """(the field it came under, the constraint) of a request, None if it has none; HarnessError if malformed
    or if two fields disagree."""
    found: dict[str, ConstraintSpec] = {}
    for name in NAMES:
        value = body.get(name)
        if value is None:
            continue
        spec = (_from_response_format(value) if name == "response_format" else
                _from_structured_outputs(value) if name == "structured_outputs" else
                ConstraintSpec("json_schema", _schema(value)) if name in ("guided_json", "json_schema") else
                ConstraintSpec("regex", value) if name in ("guided_regex", "regex") else
                _choice(value) if name == "guided_choice" else _grammar(value))
        if spec is not None:
            found[name] = spec
    if len(set(found.values())) > 1:
        raise HarnessError(f"the request gives different constraints under {', '.join(found)}")
    return next(iter(found.items()), None)


def request_fields(constraint) -> dict:
    """A constraint (ConstraintSpec or a compiled GrammarConstraint) as request fields: a JSON schema under
    OpenAI's `response_format`, a regex / Lark grammar under vLLM's `structured_outputs`."""
    kind, source = constraint.kind, constraint.source
    source = source if isinstance(source, str) else json.dumps(source)
    if kind == "json_schema":
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "specdec", "schema": json.loads(source)}}}
    return {"structured_outputs": {"regex" if kind == "regex" else "grammar": source}}


# ---------------------------------------------------------------- `specdec probe`: which names the server honours

PROBE_REGEX = "[a-c]+"  # every prefix of a match is a match: outputs cut at max_tokens stay checkable
PROBE_FIELDS = {
    "structured_outputs.regex (vLLM)": {"structured_outputs": {"regex": PROBE_REGEX}},
    "guided_regex (vLLM, older)": {"guided_regex": PROBE_REGEX},
    "regex (SGLang)": {"regex": PROBE_REGEX},
    "grammar (llama.cpp GBNF)": {"grammar": "root ::= [a-c]+"},
    "response_format json_schema (OpenAI)": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "probe", "schema": {"type": "string", "pattern": "^[a-c]+$"}}}},
    "json_schema (llama.cpp / SGLang)": {"json_schema": {"type": "string", "pattern": "^[a-c]+$"}},
}
_TOY_TEXT = re.compile(r"^( \d+)+$")


def _spelled(text: str) -> str:
    """The text a constraint sees: the toy id text (" 0 2 1") spelled as its letters ("acb")."""
    if _TOY_TEXT.match(text) and all(int(t) < 26 for t in text.split()):
        return "".join(chr(ord("a") + int(t)) for t in text.split())
    return text


def _obeys(field: str, text: str) -> bool:
    text = _spelled(text)
    if "json" in field:
        return re.fullmatch(r'"[a-c]*"?', text.strip()) is not None
    return re.fullmatch(r"[a-c]*", text) is not None and text != ""


NOT_SENT = "not sent: this client does not translate it (`specdec campaign structured --parts llama-server` probes the native names)"


def structured_support(client, model: str, prompt) -> dict[str, str]:
    """Per request name: "honoured" (8 sampled outputs at T = 1 all obey a constraint to the letters a-c),
    "ignored" (accepted, some output disobeys), or "refused (HTTP status)"."""
    from harness.served.client import RequestRefused

    if getattr(client, "sends_constraints", True) is False:  # it would refuse each request (never sends one unconstrained)
        return {name: NOT_SENT for name in PROBE_FIELDS}
    out = {}
    for name, fields in PROBE_FIELDS.items():
        try:
            reply = client.post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 6, "n": 8,
                                                    "temperature": 1.0, "seed": 3, **fields})
        except RequestRefused as exc:
            out[name] = f"refused ({exc.status})"
            continue
        texts = [c.get("text", "") for c in (reply or {}).get("choices") or []]
        out[name] = "honoured" if texts and all(_obeys(name, t) for t in texts) else "ignored"
    return out


# ---------------------------------------------------------------- llama-server: the constraint under its native names

class _NativeFields(EngineClient):
    """Adds this thread's pending fields to the body of llama-server's native `/completion` requests."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pending = threading.local()

    def request(self, method: str, path: str, payload: dict | None = None, *, parse_json: bool = True):
        fields = getattr(self._pending, "fields", None)
        if path == "/completion" and payload is not None and fields:
            payload = {**payload, **fields}
        return super().request(method, path, payload, parse_json=parse_json)


class ConstrainedLlamaServerClient(LlamaServerClient, _NativeFields):
    """LlamaServerClient for a constrained check: a request that carries `spec` (under the vLLM / OpenAI names the
    engine check writes) reaches llama-server's `/completion` with `native` instead (`{"grammar": GBNF}` or
    `{"json_schema": S}`, the names llama-server reads). A request with another constraint is an error."""

    sends_constraints = True

    def __init__(self, endpoint: str, *, spec: ConstraintSpec, native: dict, **options):
        super().__init__(endpoint, **options)
        if not native or set(native) - {"grammar", "json_schema"}:
            raise HarnessError("llama-server takes a constraint as `grammar` (GBNF) or `json_schema`")
        self.spec, self.native = spec, dict(native)

    def request(self, method: str, path: str, payload: dict | None = None, *, parse_json: bool = True):
        if method == "POST" and path == "/v1/completions" and payload:
            found = request_constraint(payload)
            if found is not None and found[1] != self.spec:
                raise HarnessError(f"this client sends {self.spec} to llama-server; the request has {found[1]}")
            self._pending.fields = self.native if found is not None else None
            try:
                return super().request(method, path, payload, parse_json=parse_json)
            finally:
                self._pending.fields = None
        return super().request(method, path, payload, parse_json=parse_json)


def gbnf_spec(gbnf: str) -> ConstraintSpec:
    """A GBNF grammar (llama.cpp's) as the spec the ground truth compiles: llguidance's Lark translation of it."""
    return _grammar(gbnf)


def stored_rows(path, role: str = "engine") -> list[tuple[list[int], str]]:
    """(token ids, finish reason) of every sampled continuation a run recorded (ResponseStore JSON lines) under
    `role` (the engine check's sampling cells; greedy cells are role "engine-greedy")."""
    out = []
    if path is None or not Path(path).exists():
        return out
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not str(record.get("key", "")).startswith(role + "/"):
            continue
        for choice in (record.get("response") or {}).get("choices") or []:
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                out.append(([int(t) for t in ids], str(choice.get("finish_reason"))))
    return out


def engine_format_test(constraint, rows: list[tuple[list[int], str]], max_tokens: int, eos: int | None):
    """The deterministic format test on an engine's continuations: every one allowed by the automaton token by
    token; a continuation that stopped before `max_tokens` stopped on EOS, which must be allowed there (the
    automaton accepts). The result names the first offending row, position and token."""
    from harness.check.report import deterministic_result
    from harness.check.structured import format_problem

    full = [ids + ([eos] if reason == "stop" and len(ids) < max_tokens and eos is not None
                   and (not ids or ids[-1] != eos) else []) for ids, reason in rows]
    bad, first = format_problem(constraint, [], full)
    return deterministic_result("engine/constraint_format", bad == 0, n=len(full), violations=bad,
                                message=f"{bad} of {len(full)} outputs break the constraint; first: {first}"
                                if bad else "")


def speculation_metrics(client: EngineClient) -> dict[str, float]:
    """llama-server's speculative-decoding counters from its Prometheus `/metrics` (started with --metrics);
    {} when the route is absent."""
    text = client.optional("GET", "/metrics", parse_json=False) or ""
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("llamacpp:spec_decode") or name in ("llamacpp:tokens_predicted_total",):
            try:
                out[name.removeprefix("llamacpp:")] = float(value)
            except ValueError:
                continue
    return out
