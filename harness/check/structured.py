"""Structured outputs at the generation level: constraints bound to a pair, and the format check.

A sampling setting may carry a constraint (`Setting(constraint=ConstraintSpec("regex", "[a-d]+"))`,
or `--setting 'T=1,regex=[a-d]+'`). The spec names no tokenizer; `bind_constraints` compiles it once per
pair with llguidance (specdec_ref.constraints: the toy pairs spell token i as the letter 'a' + i, real
pairs use their tokenizer) and checks it before any work: a regex / schema / grammar the library rejects,
one that allows nothing at the first position, or (toy pairs, enumerated) one that reaches a state where
no token is allowed within the continuation length raise HarnessError (exit 2, one line).

The ground truth is then the target's law under the same processing, constraint mask included (the joint
law by enumeration on toy pairs, teacher-forced PIT of the masked law on real pairs:
harness.check.exact_laws, harness.check.pit). `CONSTRAINT_FORMAT` adds a deterministic test per cell: every returned
continuation must be allowed by the automaton token by token (EOS only where it accepts); a FAIL names
the first offending row, position and token. It has power where the law tests have none (few samples).
"""

from __future__ import annotations

import dataclasses
import functools
import json

from harness.check.driver import Check
from harness.check.report import deterministic_result
from harness.errors import HarnessError
from specdec_ref.errors import SpecDecInputError

KINDS = ("regex", "json_schema", "lark")


@dataclasses.dataclass(frozen=True)
class ConstraintSpec:
    """A constraint as the user wrote it (no tokenizer yet): kind (regex | json_schema | lark) and source."""

    kind: str
    source: str

    def __post_init__(self):
        if self.kind not in KINDS:
            raise HarnessError(f"constraint kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.source, str):
            object.__setattr__(self, "source", json.dumps(self.source))

    def __str__(self) -> str:
        return f"{self.kind}={self.source}"


@functools.cache
def _compiled(spec: ConstraintSpec, pair_name: str, vocab: int, eos: int | None, tokenizer):
    from specdec_ref.constraints import GrammarConstraint, hf_tokenizer, toy_tokenizer

    tok = toy_tokenizer(vocab, eos) if tokenizer is None else hf_tokenizer(tokenizer, vocab, eos)
    return GrammarConstraint(spec.kind, spec.source, tok)


def compile_for_pair(spec: ConstraintSpec, pair):
    """The spec compiled for `pair`'s tokenizer (cached per pair); HarnessError (exit 2) if it is bad."""
    from specdec_ref.generate import default_eos

    eos = default_eos(pair.target)
    eos = eos if isinstance(eos, int) or eos is None else int(list(eos)[0])
    try:
        return _compiled(spec, pair.name, pair.vocab_size, eos, pair.tokenizer)
    except SpecDecInputError as exc:
        raise HarnessError(f"constraint {spec}: {exc}") from None


def dead_end(constraint, length: int, eos: set[int]) -> tuple[int, ...] | None:
    """A generated prefix shorter than `length` after which the constraint allows no token (None: none).

    Enumerates every prefix the automaton allows (toy vocabularies; ≤ V^(length-1) prefixes)."""
    frontier = [()]
    for _ in range(length):
        nxt = []
        for prefix in frontier:
            allowed = constraint.allowed(prefix).nonzero().flatten().tolist()
            if not allowed:
                return prefix
            nxt += [prefix + (t,) for t in allowed if t not in eos]
        frontier = nxt
    return None


def bind_constraints(settings, pair, enumerate_length: int = 0) -> tuple:
    """Settings with every ConstraintSpec compiled for `pair`; with `enumerate_length` > 0 (toy pairs) every
    reachable prefix shorter than it must allow a token. HarnessError (exit 2) names the bad constraint."""
    from specdec_ref.generate import default_eos, eos_set

    out = []
    for setting in settings:
        spec = setting.constraint
        if isinstance(spec, ConstraintSpec):
            constraint = compile_for_pair(spec, pair)
            if enumerate_length:
                stuck = dead_end(constraint, enumerate_length, eos_set(default_eos(pair.target)))
                if stuck is not None:
                    raise HarnessError(f"constraint {spec}: no token is allowed after {list(stuck)} on pair "
                                       f"{pair.name} (a complete match and the pair has no EOS, or a dead end): "
                                       f"nothing can be sampled within {enumerate_length} tokens")
            setting = dataclasses.replace(setting, constraint=constraint)
        out.append(setting)
    return tuple(out)


def format_problem(constraint, prompt: list[int], rows: list[list[int]]) -> tuple[int, str]:
    """(number of rows the constraint does not allow, a message naming the first one)."""
    bad, first = 0, ""
    for r, row in enumerate(rows):
        j = constraint.first_violation(row, prompt)
        if j is not None:
            bad += 1
            if not first:
                first = (f"row {r}: token {row[j]} at new-token position {j} is not allowed by {constraint} after "
                         f"{row[:j]}")
    return bad, first


def _format_run(cell, tokens, rate: float, power: float):
    setting, prompt = cell.data.setting, cell.data.prompt
    rows = [[t for t in row if t >= 0] for row in tokens.tolist()]
    bad, first = format_problem(setting.constraint, prompt, rows)
    cell.summary["constraint_violations"] = bad
    return [deterministic_result(f"{cell.name}/constraint_format", bad == 0, n=len(rows),
                                 message=f"{bad} of {len(rows)} outputs break the constraint; first: {first}" if bad
                                 else "", violations=bad)]


CONSTRAINT_FORMAT = Check("constraint_format", lambda cell: 1, _format_run)


def checks_for(setting) -> list[Check]:
    """The structured-output checks a cell with this setting adds (none without a constraint)."""
    return [CONSTRAINT_FORMAT] if getattr(setting, "constraint", None) is not None else []


def setting_record(setting) -> dict:
    """The setting as a JSON-able record (a compiled constraint as its text)."""
    constraint = getattr(setting, "constraint", None)
    record = dataclasses.asdict(dataclasses.replace(setting, constraint=None))
    record["constraint"] = None if constraint is None else str(constraint)
    return record
