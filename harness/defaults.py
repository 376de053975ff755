"""The statistical defaults every layer shares, written once (no imports: the lightest module of all).

harness.check.config re-exports them beside the check's other defaults; harness.stats uses them as the
defaults of its functions' test level and power."""

DEFAULT_FALSE_ALARM_RATE = 1e-3  # family-wise: a correct implementation fails a whole run with probability <= this
DEFAULT_POWER = 0.99  # probability of detecting a discrepancy of the planned size
