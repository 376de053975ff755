"""Producers of results/findings/ (engines and libraries people run, checked with specdec)."""
