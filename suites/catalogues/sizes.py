"""Default sizes of the checks' plans (policy): how many rows a cell draws when the user names no --samples.
The mechanism (harness.check.generation, harness.check.context_cells, harness.served.greedy) loads them through harness.policy. Light: no imports."""

# Default rows of a generation-level prompt cell (key: V <= 64, where the exact joint law is enumerated, or not), with
# or without contexts cells. A toy pair's prompt cells carry the token-law guarantee (the exact joint law of the
# continuation at one prompt), which no pooled statistic replaces: at 2,000 rows beside the contexts cells they missed
# penalties_count_rejected_drafts_mild (exact TV 0.031 / 0.036), which 20,000 rows catch (the headline campaign,
# suites/campaigns/headline.py).
PROMPT_ROWS = {True: 20_000, False: 200}

# Default rows of a contexts cell (spread round-robin over its contexts). A real pair's 410 rows of 16 new tokens
# (~6,500 tokens; EOS ends a few rows early) put the pooled PIT's detectable TV just under 0.05 (measured on SmolLM2:
# 7,022 tokens gave 0.047, 6,362 gave 0.0503; results/contexts/README.md); the toy pairs' 1,100 rows of 40 tokens at
# about 0.02.
CONTEXT_ROWS = {True: 1_100, False: 410}

# Engine level: new tokens of a greedy (T = 0) continuation compared with the reference's / the local target's.
ENGINE_GREEDY_TOKENS = 16
