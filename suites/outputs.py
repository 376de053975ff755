"""Where each `specdec` producer writes when no --out is given: the results/ folders (policy).

The commands whose mechanism lives in harness/ (bench, numerics, the verify matrix), and the campaigns of
suites/campaigns built on the campaign runner (harness.runner: "campaign.NAME", the default of their --out)."""

FOLDERS = {
    "bench": "results/bench",  # specdec bench: OUT/RUN per suite run
    "numerics": "results/numerics",  # specdec numerics
    "verify-matrix": "results/verify-matrix",  # specdec verify --vary
    "campaign.check_time": "results/bench/check-time",
    "campaign.estimate": "results/estimate",
    "campaign.families": "results/families",
    "campaign.headline": "results/headline",
    "campaign.tail": "results/tail",
    "campaign.tree": "results/tree",
}
