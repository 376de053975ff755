"""The masked-step catalogue (structured outputs at the sampler level): the token automata the harness draws
for `harness.check.structured_step` when no cases are named."""

from harness.check.structured_step import ConstrainedCase

CASES = (
    ConstrainedCase("dfa-4", 3, 8, 4, 0.5, "4-state DFA over 8 tokens, half the tokens allowed per state"),
    ConstrainedCase("dfa-sparse", 4, 12, 6, 0.25, "6-state DFA over 12 tokens, a quarter allowed per state, γ = 4"),
)
