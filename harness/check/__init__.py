"""Statistical losslessness checks of an implementation: sampler level (§1a), generation level (§1b), and
one tree verification step (docs/CONTRACT-tree.md, `tree.run_tree_check`).

`sampler.run_sampler_check`, `generation.run_generation_check` and `tree.run_tree_check` return a `CheckReport`; Holm over
every gating test sets the verdict at the suite false-alarm rate; each test states the smallest
discrepancy it detects.
"""
