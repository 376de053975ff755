"""Convention diagnosis: after a failed cell, the other processing orders (specdec_ref.processing.ORDERS) under
which the target explains the outputs. A convention (top-p before temperature, ...) is not a verification bug."""

from __future__ import annotations

import numpy as np

from harness.check.exact_laws import continuation_law, joint_law_tests, rows_to_keys
from harness.check.pit import pit_tests, pit_values
from harness.check.settings import Setting
from specdec_ref.processing import ORDERS


def convention_tests(tokens, model, prompt, length, setting, vocab, eos, order, rate, power, prefix, enumerate_law,
                     rng):
    """The gating tests of one cell, against the target processed under `order`."""
    if enumerate_law:
        law = continuation_law(model, prompt, length, setting, vocab, eos, order)
        return joint_law_tests(rows_to_keys(tokens), law, rate, power, prefix)
    u, pos, seq, off = pit_values(model, prompt, tokens, setting, vocab, rng, eos=eos, order=order)
    return pit_tests(u, pos, seq, off, rate, power, prefix)


def consistent_conventions(tokens, model, prompt, length, setting, vocab, eos, declared, rate, power,
                           enumerate_law, seed) -> list[str]:
    """After a failed cell: the other processing orders under which the target explains the outputs
    (every test of the cell passes at the per-test rate). A convention, not a verification bug."""
    found = []
    for order in ORDERS:
        if order == declared or not order_matters(setting, order):
            continue
        tests = convention_tests(tokens, model, prompt, length, setting, vocab, eos, order, rate, power, "convention",
                                 enumerate_law, np.random.default_rng(seed))
        if all(t.p_value > rate for t in tests):
            found.append(order)
    return found


def order_matters(setting: Setting, order: str) -> bool:
    """Whether `order` can give a different law than the standard one for this setting."""
    if order == "llama_cpp":  # its default truncation applies to every sampled setting
        return setting.temperature > 0
    if setting.temperature in (0, 1) and order != "top_k_after_top_p":
        return False
    cuts = setting.top_k is not None or setting.top_p is not None or setting.min_p is not None
    return {"top_p_before_temperature": cuts,
            "top_k_after_top_p": setting.top_k is not None and setting.top_p is not None,
            "penalties_after_temperature": bool(setting.logit_bias or setting.frequency_penalty
                                                or setting.presence_penalty)}.get(order, False)
