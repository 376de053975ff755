"""The mutant zoo and the correct controls (sampler level §1a and generation level §1b).

    from harness.mutants import implementations, get
    for impl in implementations(kind="mutant", contract="sampler"):
        impl.fn(target_probs, draft_probs, draft_tokens, generator)   # §1a
        impl.exact_law(p_row, q_row)                                  # exact first-token law, or None

Kinds: `mutant` (lossy, must be caught), `equivalent` (cannot change the law, must pass, excluded
from power claims), `wasteful` (lossless with acceptance below Σ min(p, q): must pass and be reported),
`control` (independent correct formulations: must pass). Each entry names the real bug it models
(docs/BUGS.md) in `models`, and what a test needs to catch it in `needs`.
"""

from harness.mutants.laws import exact_tv, exact_tvs
from harness.mutants.registry import Implementation, get, implementations, register

__all__ = ["Implementation", "exact_tv", "exact_tvs", "get", "implementations", "register"]
