"""Property-based sampler checks: random distributions and settings, fixed seeds (derandomized)."""

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.check.sampler import custom_case, run_sampler_check
from specdec_ref.adapters import verify
from specdec_ref.processing import logits_to_probs

EXAMPLES = 40
RATE_EACH = 1e-3 / EXAMPLES  # union bound: the property suite's false-alarm budget is 1e-3


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(
    vocab=st.sampled_from([2, 3, 17, 100, 1000, 4000]),
    gamma=st.integers(1, 8),
    temperature=st.sampled_from([0.3, 0.7, 1.0, 1.5]),
    top_k=st.one_of(st.none(), st.integers(1, 50)),
    top_p=st.one_of(st.none(), st.floats(0.5, 0.99)),
    scale=st.sampled_from([0.5, 2.0, 8.0, 40.0]),  # 40: probabilities down to ~1e-17
    closeness=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_reference_is_lossless_on_random_configurations(vocab, gamma, temperature, top_k, top_p, scale, closeness,
                                                        seed):
    rng = np.random.default_rng(seed)
    z = torch.from_numpy(rng.normal(0, scale, size=(gamma + 1, vocab)))
    noise = torch.from_numpy(rng.normal(0, scale, size=(gamma, vocab)))
    p = logits_to_probs(z, temperature, top_k, top_p).numpy()
    q = logits_to_probs(closeness * z[:gamma] + (1 - closeness) * noise, temperature, top_k, top_p).numpy()
    case = custom_case(f"V{vocab}-g{gamma}", p, q)
    report = run_sampler_check(verify, cases=[case], false_alarm_rate=RATE_EACH, tv=0.05, seed=seed,
                               max_rows=60_000)
    assert report.verdict == "pass", [t.name for t in report.tests if t.reject]
