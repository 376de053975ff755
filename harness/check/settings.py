"""Sampling settings of the generation level: what `--setting` reads, the policy's batteries, and which settings an
implementation can run (the optional parameters its signature accepts)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

from harness.errors import HarnessError
from harness.policy import catalogue
from specdec_ref.errors import SpecDecInputError
from specdec_ref.processing import PARAM_NAMES, SamplingParams, check_params


@dataclasses.dataclass(frozen=True)
class Setting(SamplingParams):
    """One sampling setting of the battery: every parameter of specdec_ref.processing.SamplingParams."""

    @property
    def label(self) -> str:
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top_k={self.top_k}")
        if self.top_p is not None:
            parts.append(f"top_p={self.top_p:g}")
        for name, value in self.extras().items():
            text = (" ".join(f"{k}:{b:+g}" for k, b in value.items()) if name == "logit_bias" else
                    "|".join(".".join(map(str, w)) for w in value) if name == "bad_words_ids" else
                    str(value) if name == "constraint" else f"{value:g}")
            parts.append(text if name == "constraint" else f"{name}={text}")  # "regex=...", last (may hold commas)
        return ",".join(parts)


def default_settings() -> tuple[Setting, ...]:
    """The policy's default sampling settings (suites/catalogues/generation.py), in run order."""
    return tuple(catalogue("generation").DEFAULT_SETTINGS)


def parameter_settings() -> tuple[Setting, ...]:
    """The policy's `battery`: every sampling parameter alone, then a combination."""
    return tuple(catalogue("generation").PARAMETER_SETTINGS)

SETTING_WORDS = ("battery", "default")  # whole batteries: parameter_settings(), default_settings()
SETTING_FIELDS = ("T", "temperature", "top_k", "top_p", *PARAM_NAMES)


def parse_setting(text: str) -> tuple[Setting, ...]:
    """`--setting` text -> settings: "battery" (parameter_settings()), "default", or comma-separated
    name=value pairs, e.g. "T=0.8,top_p=0.95,min_p=0.05,logit_bias=5:+1 2:-1,bad_words_ids=3|4.4".
    An unknown name (e.g. "minp") raises UnknownNameError with the valid ones ("Did you mean ...?", exit 2)."""
    from harness.errors import UnknownNameError

    if text in SETTING_WORDS:
        return parameter_settings() if text == "battery" else default_settings()
    fields: dict = {}
    text, constraint = _split_constraint(text)
    if constraint is not None:
        fields["constraint"] = constraint
    items = [item.partition("=") for item in filter(None, (i.strip() for i in text.split(",")))]
    for name, eq, _ in items:
        if name.strip() not in SETTING_FIELDS:
            known = list(SETTING_FIELDS) + list(SETTING_WORDS) if not eq else list(SETTING_FIELDS)
            raise UnknownNameError("--setting name", name.strip(), known)
    try:
        for name, eq, value in items:
            name = {"T": "temperature"}.get(name.strip(), name.strip())
            if not eq:
                raise ValueError(f"{name} has no value (write {name}=VALUE)")
            if name == "logit_bias":
                fields[name] = tuple((int(k), float(b)) for k, b in (pair.split(":") for pair in value.split()))
            elif name == "bad_words_ids":
                fields[name] = tuple(tuple(int(t) for t in w.split(".")) for w in value.split("|"))
            elif name in ("top_k", "min_new_tokens"):
                fields[name] = int(value)
            else:
                fields[name] = float(value)
        return (Setting(**fields),)
    except (TypeError, ValueError) as exc:
        raise HarnessError(f"--setting {text!r} cannot be read ({exc}); write e.g. "
                           "'T=0.8,top_p=0.95,min_p=0.05,logit_bias=5:+1' or 'battery'") from None


def _split_constraint(text: str):
    """`--setting` text -> (the rest, ConstraintSpec or None): a constraint field (regex= / json_schema= /
    lark=) comes last and takes the rest of the text, commas included (harness.check.structured)."""
    from harness.check.structured import KINDS, ConstraintSpec

    starts = [i for kind in KINDS for i in [text.find(f"{kind}=")] if i >= 0 and (i == 0 or text[i - 1] == ",")]
    if not starts:
        return text, None
    at = min(starts)
    kind, _, source = text[at:].partition("=")
    if not source:
        raise HarnessError(f"--setting {text!r}: {kind}= needs a value (the constraint, last in the setting)")
    return text[:at], ConstraintSpec(kind, source)


def accepted_parameters(impl: Callable) -> set[str]:
    """The optional sampling parameters (PARAM_NAMES) that `impl`'s signature accepts (all with **kwargs)."""
    try:
        params = inspect.signature(impl).parameters.values()
    except (TypeError, ValueError):  # builtins / C callables: assume the plain contract only
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return set(PARAM_NAMES)
    return {p.name for p in params} & set(PARAM_NAMES)


def supported_settings(impl: Callable, settings, vocab: int) -> tuple[list[Setting], list[dict]]:
    """(settings to run, skipped ones with the parameters the implementation does not accept); bad
    parameters raise HarnessError (exit 2) before anything runs."""
    accepted, run, skipped = accepted_parameters(impl), [], []
    for setting in settings:
        try:
            check_params(setting, vocab)
        except SpecDecInputError as exc:
            raise HarnessError(f"setting {setting.label}: {exc}") from None
        if setting.temperature == 0 and setting.extras():  # greedy_tests compares with plain target greedy
            raise HarnessError(f"setting {setting.label}: the optional parameters are checked at temperature > 0 "
                               "only (greedy equality runs without them)")
        missing = sorted(set(setting.extras()) - accepted)
        (skipped.append({"setting": setting.label, "not_accepted": missing}) if missing else run.append(setting))
    return run, skipped
