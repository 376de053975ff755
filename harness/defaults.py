"""The statistical defaults every layer shares, written once (no imports: the lightest module of all).

harness.check.config re-exports them beside the check's other defaults; harness.stats uses them as the
defaults of its functions' per-test rate and power."""

DEFAULT_FALSE_ALARM_RATE = 1e-3  # family-wise: a correct implementation fails a whole run with probability <= this
DEFAULT_POWER = 0.99  # probability of detecting a discrepancy of the planned size
# A run whose achieved detectable TV is above this says almost nothing: the verdict is INCONCLUSIVE.
INCONCLUSIVE_TV = 0.25

# Exit codes of every command (docs/EXIT_CODES.md): 0 success; 1 the implementation is not lossless (or a mutant
# escaped); 2 the run could not be done (usage, input, environment, a harness / model / kernel fault);
# 3 INCONCLUSIVE (nothing rejects, but the achieved detectable TV is above the bar).
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3
