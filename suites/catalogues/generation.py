"""The generation-level settings catalogue: the sampling settings `specdec verify --level generation`
(and the engine level) run when no `--setting` is named, and the `battery` of every sampling parameter
(harness.check.settings loads them through harness.policy)."""

from __future__ import annotations

from harness.check.settings import Setting

# Order = the order cells run in (a run with stop_on_fail ends at the first decided cell): greedy first
# (deterministic and cheap), then the setting with the most processing (temperature and top-p, where
# processing bugs show), then plain sampling.
DEFAULT_SETTINGS = (Setting(0.0), Setting(0.7, top_p=0.9), Setting(1.0))

# The parameters engines serve beyond temperature / top-k / top-p: each alone, then a realistic
# combination. Sized on the toy pairs (V = 16, where short continuations repeat tokens) so that each
# moves the exact 3-token law of the toy prompts by a clear TV from the same setting without it
# (tests/check/test_generation_params.py measures it). Token 5 is the toy target's favourite first token after its first prompt.
FREQUENT_TOKEN = 5
PARAMETER_SETTINGS = (
    Setting(1.0, min_p=0.2),
    Setting(1.0, logit_bias=((2, 1.5), (FREQUENT_TOKEN, -2.0))),
    Setting(1.0, repetition_penalty=2.0),
    Setting(1.0, frequency_penalty=3.0),
    Setting(1.0, presence_penalty=3.0),
    Setting(1.0, bad_words_ids=((FREQUENT_TOKEN,), (12, 12))),
    Setting(1.0, min_new_tokens=2),
    Setting(0.8, top_p=0.95, min_p=0.05, repetition_penalty=1.2, logit_bias=((FREQUENT_TOKEN, 1.0),)),
)
