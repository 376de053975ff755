"""Where each `specdec` producer writes when no --out is given: the results/ folders (policy).

The campaigns in suites/campaigns/ name their own folders; these are the commands whose mechanism lives in
harness/ (bench, numerics, the verify matrix)."""

FOLDERS = {
    "bench": "results/bench",  # specdec bench: OUT/RUN per suite run
    "numerics": "results/numerics",  # specdec numerics
    "verify-matrix": "results/verify-matrix",  # specdec verify --vary
}
