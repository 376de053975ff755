"""Statistical losslessness checks, all through one driver (`driver.run_battery`, configured by `config.CheckConfig`).

Trial sources: `sampler` (one §1a verification step, chain or block family), `draft_step` (the
implementation draws its own drafts), `tree` (one tree step, docs/CONTRACT-tree.md), `generation` (a whole
§1b generate()), and the engine level in harness/served (a served engine over HTTP). Each returns a
`CheckReport`: Holm over every gating test sets the verdict at the family-wise false-alarm rate, each test
states the smallest discrepancy it detects, and a plan too small to promise a useful one is INCONCLUSIVE.
`sequential` adds anytime-valid early stopping at the sampler level.
"""
