"""Pure statistics engine of the harness: numpy + scipy only, never torch.

Every check follows the TFP `statistical_testing` contract: a stated false-alarm rate α and a detectable
discrepancy ε at a power, with the planner beside the test.

result        TestResult, the record every check returns
categorical   one categorical with known p: support, pooled Pearson/G, Monte Carlo Pearson, event tests
pit           randomized PIT for sequences with known conditionals: uniformity, per position, serial
multiplicity  Holm (the gate) and Benjamini–Hochberg (reporting only)
power         sample-size planner: n ↔ detectable TV, power against a given alternative, theory floor
pooling       merging of under-filled cells, shared by the tests and the planner
bounds        how many drafts a lossless rule can accept: universal (joint coupling), block, token level
sequential    anytime-valid e-processes (mixture likelihood ratios) for early stopping under Ville's inequality
"""

from harness.stats.bounds import (
    AcceptanceBound,
    acceptance_bound,
    block_acceptance,
    token_level_optimum,
    universal_acceptance_bound,
)
from harness.stats.categorical import (
    binomial_event_test,
    monte_carlo_pvalue,
    nucleus_mask_top_p,
    pearson_mc,
    pearson_statistic,
    pool_cells,
    pooled_gtest,
    pooled_pearson,
    support_check,
)
from harness.stats.multiplicity import benjamini_hochberg, holm, holm_adjusted
from harness.stats.pit import (
    ks_uniformity_test,
    mass_above_descending,
    per_position_uniformity,
    pit_bin_edges,
    pit_from_masses,
    probit_mean_test,
    probit_per_stratum_test,
    probit_scores,
    randomized_pit,
    runs_pmf,
    runs_test,
    serial_grid_test,
    serial_independence_test,
    stratified_uniformity_test,
    uniformity_test,
)
from harness.stats.power import (
    DEFAULT_POWER,
    DEFAULT_RATE,
    detectable_binomial_shift,
    detectable_kolmogorov,
    detectable_rank_correlation,
    detectable_tv,
    identity_testing_floor,
    noncentrality_needed,
    power_against,
    samples_needed,
    samples_needed_against,
    samples_needed_binomial,
)
from harness.stats.result import TestResult
from harness.stats.sequential import (
    BernoulliAboveEProcess,
    CategoricalEProcess,
    EProcess,
    SerialEProcess,
    UniformityEProcess,
    crossing_log_threshold,
    eprocess_result,
)

__all__ = [
    "AcceptanceBound",
    "acceptance_bound",
    "block_acceptance",
    "token_level_optimum",
    "universal_acceptance_bound",
    "BernoulliAboveEProcess",
    "CategoricalEProcess",
    "DEFAULT_RATE",
    "DEFAULT_POWER",
    "EProcess",
    "SerialEProcess",
    "UniformityEProcess",
    "crossing_log_threshold",
    "eprocess_result",
    "TestResult",
    "benjamini_hochberg",
    "binomial_event_test",
    "detectable_binomial_shift",
    "detectable_kolmogorov",
    "detectable_rank_correlation",
    "detectable_tv",
    "holm",
    "holm_adjusted",
    "identity_testing_floor",
    "ks_uniformity_test",
    "mass_above_descending",
    "monte_carlo_pvalue",
    "noncentrality_needed",
    "nucleus_mask_top_p",
    "pearson_mc",
    "pearson_statistic",
    "per_position_uniformity",
    "pit_bin_edges",
    "pit_from_masses",
    "pool_cells",
    "pooled_gtest",
    "pooled_pearson",
    "power_against",
    "probit_mean_test",
    "probit_per_stratum_test",
    "probit_scores",
    "randomized_pit",
    "samples_needed",
    "samples_needed_against",
    "samples_needed_binomial",
    "serial_grid_test",
    "runs_pmf",
    "runs_test",
    "serial_independence_test",
    "stratified_uniformity_test",
    "support_check",
    "uniformity_test",
]
