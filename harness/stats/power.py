"""Sample-size planner: the experiment-design half of the TFP contract.

Each check promises a false-alarm rate α and a detectable discrepancy ε at power 1−β. This module
converts between n and ε for the tests in `categorical` and `pit`:

* Pearson X² (and G, which shares its limit under local alternatives; Cressie & Read 1984) with df
  degrees of freedom: under an alternative q, X² ≈ noncentral χ²(df, λ), λ = n·χ²(q‖p),
  χ²(q‖p) = Σ(q−p)²/p. Power = ncx2.sf(chi2.isf(α, df), df, λ). Let λ* be the noncentrality that
  reaches the target power. Cauchy–Schwarz gives χ²(q‖p) ≥ (Σ|q−p|)² = 4·TV², so
  n = λ*/(4ε²) catches *every* alternative at TV ≥ ε (worst case; this noncentral limit is Pitman's
  local-alternative approximation, so the promise is approximate too). For one specific alternative,
  `power_against` uses a two-moment approximation that tracks simulation more closely.
* Binomial event tests (normal approximation; exact when p0 is 0 or 1, where any hit rejects).
* Kolmogorov–Smirnov: exact null critical value plus a one-sided Hoeffding bound under the alternative.
* Spearman rank correlation: Fisher z with the Fieller–Hartley–Pearson variance.
* The theory floor for identity testing, Θ(√k/ε²) samples (Paninski 2008, "A coincidence-based test
  for uniformity given very sparsely sampled discrete data"; Valiant & Valiant 2014, "An automatic
  inequality prover and instance optimal identity testing"; Acharya, Daskalakis & Kamath 2015), so a
  report can say how far above the floor a plan sits.

Defaults: false-alarm rate 1e-3 and power 0.95, the project's standard plan.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.optimize import brentq
from scipy.stats import chi2, kstwo, ncx2, norm

from harness.defaults import DEFAULT_FALSE_ALARM_RATE, DEFAULT_POWER
from harness.stats.pooling import DEFAULT_MIN_EXPECTED, pool_by_labels, pool_labels

DEFAULT_RATE = DEFAULT_FALSE_ALARM_RATE  # default per-test false-alarm rate of the functions here

_ALTERNATIVES = ("two-sided", "greater", "less")


def _check_rate(rate: float) -> None:
    if not 0.0 < rate < 1.0:
        raise ValueError(f"rate must be in (0, 1), got {rate}")


def _check_rate_and_power(rate: float, power: float) -> None:
    _check_rate(rate)
    if not rate < power < 1.0:
        raise ValueError(f"power must be in (rate, 1), got {power} with rate={rate}")


# ---------------------------------------------------------------------------------------------------
# Pearson / G (chi-square family)
# ---------------------------------------------------------------------------------------------------


def noncentrality_needed(df: int, rate: float = DEFAULT_RATE, power: float = DEFAULT_POWER) -> float:
    """λ* such that a chi-square test at false-alarm rate `rate` with df degrees of freedom has the given power."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    _check_rate_and_power(rate, power)
    return _noncentrality_cached(int(df), float(rate), float(power))


@functools.lru_cache(maxsize=4096)  # called once per test result; brentq over ncx2 costs ~ms
def _noncentrality_cached(df: int, rate: float, power: float) -> float:
    critical = chi2.isf(rate, df)

    def shortfall(lam: float) -> float:
        return ncx2.sf(critical, df, lam) - power

    upper = float(df)
    while shortfall(upper) < 0:
        upper *= 2.0
    return float(brentq(shortfall, 0.0, upper, xtol=1e-10, rtol=1e-12))


def samples_needed(tv: float, df: int, rate: float = DEFAULT_RATE, power: float = DEFAULT_POWER) -> int:
    """Worst-case n so that every alternative at TV ≥ tv is caught with the given power."""
    if not 0.0 < tv <= 1.0:
        raise ValueError(f"tv must be in (0, 1], got {tv}")
    return math.ceil(noncentrality_needed(df, rate, power) / (4.0 * tv * tv))


def detectable_tv(n: int, df: int, rate: float = DEFAULT_RATE, power: float = DEFAULT_POWER) -> float:
    """Smallest TV caught at the given power with n draws (worst case over alternatives).

    Returns inf when nothing is promised: no draws, no degrees of freedom, or a bound ≥ 1.
    """
    if n <= 0 or df < 1:
        return math.inf
    eps = math.sqrt(noncentrality_needed(df, rate, power) / (4.0 * n))
    return eps if eps < 1.0 else math.inf


def power_against(
    q: np.ndarray,
    p: np.ndarray,
    n: int,
    rate: float = DEFAULT_RATE,
    *,
    min_expected: float = DEFAULT_MIN_EXPECTED,
) -> float:
    """Predicted power of `categorical.pooled_pearson` against the specific alternative q.

    Pools p and q with the grouping the test applies to the data (it depends on p and n only), then
    approximates X² under q by a scaled chi-square c·χ²(ν) matched to its mean and variance
    (Satterthwaite's two-moment approximation):

        mean = Σ q(1−q)/p + n·χ²(q‖p)                                   (exact)
        var  ≈ 2[Σr² − 2Σqr² + (Σqr)²] + 4n[Σqw² − (Σqw)²],  r = q/p, w = (q−p)/p

    (variance of the Gaussian quadratic form; drops an O(1) third-cumulant term). The Pitman noncentral
    χ²(df, n·χ²(q‖p)) of the worst-case planner is the local limit of this; for fixed alternatives it is
    off by up to 0.2 in power (e.g. a sharpened Zipf: it predicts 0.80, simulation gives 0.61, this
    gives 0.62), because Σq(1−q)/p ≠ df once q leaves p. Off-support mass of q counts only through the
    pooled cell it lands in: catching it is `support_check`'s job.
    """
    _check_rate(rate)
    q, p = np.asarray(q, dtype=np.float64), np.asarray(p, dtype=np.float64)
    if q.shape != p.shape or abs(q.sum() - 1.0) > 1e-8 or abs(p.sum() - 1.0) > 1e-8:
        raise ValueError(f"q {q.shape} and p {p.shape} must be distributions over the same cells")
    labels = pool_labels(p, n, min_expected)
    df = int(labels.max())
    if df < 1:
        return rate  # a single pooled cell carries no information
    mean, var = _pearson_moments_under(pool_by_labels(q, labels), pool_by_labels(p, labels), n)
    critical = chi2.isf(rate, df)
    if var <= 0:  # q concentrated on one cell: X² is deterministic
        return float(mean > critical)
    scale, dof = var / (2.0 * mean), 2.0 * mean * mean / var
    return float(chi2.sf(critical / scale, dof))


def _pearson_moments_under(q: np.ndarray, p: np.ndarray, n: int) -> tuple[float, float]:
    """(mean, approximate variance) of Pearson X² for multinomial(n, q) counts tested against p > 0."""
    r, w = q / p, (q - p) / p
    mean = np.sum(q * (1.0 - q) / p) + n * np.sum((q - p) ** 2 / p)
    quadratic = 2.0 * (np.sum(r * r) - 2.0 * np.sum(q * r * r) + np.sum(q * r) ** 2)
    linear = 4.0 * n * (np.sum(q * w * w) - np.sum(q * w) ** 2)
    return float(mean), float(quadratic + linear)


def samples_needed_against(
    q: np.ndarray,
    p: np.ndarray,
    rate: float = DEFAULT_RATE,
    power: float = DEFAULT_POWER,
    *,
    min_expected: float = DEFAULT_MIN_EXPECTED,
    max_n: int = 10**9,
) -> int:
    """Smallest n at which `power_against(q, p, n)` reaches `power` (bisection on n).

    Pooling changes with n, so predicted power is only nearly monotone in n; bisection returns a point
    where it crosses the target, which is what an experiment plan needs.
    """
    _check_rate_and_power(rate, power)

    def enough(n: int) -> bool:
        return power_against(q, p, n, rate, min_expected=min_expected) >= power

    low, high = 1, 2
    while not enough(high):
        low, high = high, high * 2
        if high > max_n:
            raise ValueError(f"q is too close to p: more than {max_n} draws needed")
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


# ---------------------------------------------------------------------------------------------------
# Binomial event tests
# ---------------------------------------------------------------------------------------------------


def _z_critical(rate: float, alternative: str) -> float:
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {_ALTERNATIVES}, got {alternative!r}")
    return float(norm.isf(rate / 2 if alternative == "two-sided" else rate))


def samples_needed_binomial(
    p0: float,
    p1: float,
    rate: float = DEFAULT_RATE,
    power: float = DEFAULT_POWER,
    alternative: str = "two-sided",
) -> int:
    """n for a binomial test of P(event) = p0 to detect P(event) = p1 at the given power.

    Normal approximation n = ((z_α·σ0 + z_β·σ1)/(p1 − p0))², σ = √(p(1−p)); it is rough when n·p0 or
    n·p1 is below ~10. When p0 is 0 (or 1) a single hit (miss) rejects with certainty, so the exact
    answer is the n with P(at least one) ≥ power.
    """
    _check_rate_and_power(rate, power)
    za = _z_critical(rate, alternative)
    if p1 == p0 or not (0.0 <= p0 <= 1.0 and 0.0 <= p1 <= 1.0):
        raise ValueError(f"need distinct probabilities in [0, 1], got p0={p0}, p1={p1}")
    if p0 in (0.0, 1.0):
        return math.ceil(math.log1p(-power) / math.log1p(-abs(p1 - p0)))
    spread = za * _sd(p0) + norm.isf(1.0 - power) * _sd(p1)
    return math.ceil((spread / (p1 - p0)) ** 2)


def detectable_binomial_shift(
    n: int,
    p0: float,
    rate: float = DEFAULT_RATE,
    power: float = DEFAULT_POWER,
    alternative: str = "two-sided",
) -> float:
    """Smallest δ such that every reachable p1 with |p1 − p0| ≥ δ is detected at the given power.

    Normal approximation, exact when p0 is 0 or 1. Two-sided, the worse direction decides; a direction in
    which no shift is detectable (e.g. downward from p0 = 0.002 with few draws) only rules out δ ≤ its
    room, since shifts larger than p0 downward do not exist. inf when nothing is detectable.
    """
    _check_rate_and_power(rate, power)
    za = _z_critical(rate, alternative)
    if n <= 0:
        return math.inf
    directions = {"two-sided": (1, -1), "greater": (1,), "less": (-1,)}[alternative]
    rooms = {sign: _room(p0, sign) for sign in directions if _room(p0, sign) > 0}
    shifts = {sign: _one_sided_shift(n, p0, za, power, sign) for sign in rooms}
    if not any(math.isfinite(s) for s in shifts.values()):
        return math.inf
    return max(s if math.isfinite(s) else rooms[sign] for sign, s in shifts.items())


def _sd(prob: float) -> float:
    return math.sqrt(max(prob * (1.0 - prob), 0.0))


def _room(p0: float, sign: int) -> float:
    return 1.0 - p0 if sign > 0 else p0


def _one_sided_shift(n: int, p0: float, za: float, power: float, sign: int) -> float:
    if p0 in (0.0, 1.0):  # any event on the impossible side rejects: exact
        return 1.0 - (1.0 - power) ** (1.0 / n)
    zb = float(norm.isf(1.0 - power))

    def margin(shift: float) -> float:  # concave in shift and > 0 at 0: one crossing at most
        return za * _sd(p0) + zb * _sd(p0 + sign * shift) - shift * math.sqrt(n)

    room = _room(p0, sign)
    if margin(room) > 0:
        return math.inf
    return float(brentq(margin, 0.0, room, xtol=1e-12))


# ---------------------------------------------------------------------------------------------------
# Kolmogorov–Smirnov and the theory floor
# ---------------------------------------------------------------------------------------------------


def detectable_kolmogorov(n: int, rate: float = DEFAULT_RATE, power: float = DEFAULT_POWER) -> float:
    """Smallest sup-distance sup|G − F| a one-sample KS test on n draws detects at the given power.

    If G − F reaches Δ at some x, D_n ≥ Δ − |G_n(x) − G(x)| and (one-sided Hoeffding)
    P(G_n(x) − G(x) < −t) ≤ exp(−2nt²); so Δ = c_α + √(log(1/(1−power))/(2n)) with the exact null
    critical value c_α suffices. Rigorous, slightly conservative.
    """
    _check_rate_and_power(rate, power)
    if n <= 0:
        return math.inf
    return float(kstwo.isf(rate, n) + math.sqrt(math.log(1.0 / (1.0 - power)) / (2.0 * n)))


def detectable_rank_correlation(n: int, rate: float = DEFAULT_RATE, power: float = DEFAULT_POWER) -> float:
    """Smallest |Spearman ρ| a two-sided test on n pairs detects at the given power.

    Fisher's z = atanh(r_s) is roughly normal with variance 1.06/(n − 3) (Fieller, Hartley & Pearson
    1957), so ρ = tanh((z_α/2 + z_β)·√(1.06/(n − 3))).
    """
    _check_rate_and_power(rate, power)
    if n <= 3:
        return math.inf
    z = norm.isf(rate / 2) + norm.isf(1.0 - power)
    return float(math.tanh(z * math.sqrt(1.06 / (n - 3))))


def identity_testing_floor(k: int, tv: float) -> float:
    """√k/ε²: the order of samples any identity test on k cells needs at TV ε (constants omitted)."""
    if k < 1 or not 0.0 < tv <= 1.0:
        raise ValueError(f"need k >= 1 and tv in (0, 1], got k={k}, tv={tv}")
    return math.sqrt(k) / (tv * tv)
