"""Statistical losslessness checks of an implementation: sampler level (§1a) and generation level (§1b).

`sampler.run_sampler_check` and `generation.run_generation_check` return a `CheckReport`; Holm over
every gating test sets the verdict at the suite false-alarm rate; each test states the smallest
discrepancy it detects.
"""
