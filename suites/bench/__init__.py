"""Acceptance checks of the benchmark claims (slow; run with `pytest suites/bench`)."""
