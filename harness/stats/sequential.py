"""Anytime-valid (sequential) tests: test martingales that may be watched after every batch.

A test martingale M_t ≥ 0 with M_0 = 1 and E[M_t | past] ≤ M_{t−1} under H0 satisfies Ville's
inequality P(sup_t M_t ≥ 1/a) ≤ a, so a run may look after every batch and stop at the first
crossing; 1/max_{s≤t} M_s is then a p-value valid at any stopping time. A battery of m such tests
keeps its family-wise false-alarm rate ≤ α when test i rejects once log M_i ≥ log(m/α)
(Bonferroni on the thresholds: a union bound over Ville events, valid under any dependence). As
p-values, 1/sup M are valid inputs to Holm, so a battery can also mix them with fixed-n tests.

Every process here is a likelihood ratio against a *mixture* of alternatives (Robbins 1970, "Statistical
methods related to the law of the iterated logarithm"), written in closed form from sufficient counts,
so a batch update is exact and order-free, and everything stays in log space:

* `CategoricalEProcess`: one categorical with known p. Dirichlet–multinomial mixture over q, the
  construction of Lindon & Malek (NeurIPS 2022, "Anytime-valid inference for multinomial count data");
  the mixture equals the product of the predictable plug-in bets q̂_{t−1}(x_t)/p(x_t) with the
  add-(c·p) estimator, i.e. the plug-in betting e-process of Shekhar & Ramdas (arXiv 2112.09162) with
  a Bayesian predictor. The prior Dir(c·p) is centred on p; averaging a few concentrations c (still a
  test martingale) hedges between gross and small discrepancies. A draw where p = 0 gives M = ∞.
* `BernoulliAboveEProcess`: one-sided "P(event) ≤ bound" (composite null). Mixture of likelihood
  ratios θ/bound over θ uniform on (bound, bound + w·(1 − bound)); every factor has conditional
  expectation ≤ 1 for any true θ ≤ bound, so the mixture is a supermartingale on all of H0. A betting
  e-process with a fixed bet λ (Waudby-Smith & Ramdas, arXiv 2010.09686) is the same likelihood ratio
  for a point θ; the mixture averages the bets.
* `UniformityEProcess`: U(0, 1) values (randomized PIT) binned on fixed edges, a categorical with
  known bin widths.
* `SerialEProcess`: serial independence of a sequence of U(0, 1) values: each value's bin is bet on
  with a Dirichlet–multinomial predictor conditioned on the previous value's bin (a Markov-chain
  mixture). Under H0 (iid uniform) every bin has its known width whatever came before, so the product
  of the per-state mixtures is a test martingale; dependence between neighbours (and a wrong
  marginal) makes it grow.

See the survey of Ramdas, Grünwald, Vovk & Shafer (arXiv 2210.01948) for the general theory.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import betainc, betaincc, betaln, gammaln

from harness.stats.result import TestResult

# Concentrations of the Dirichlet prior in units of the number of cells k: c = k is close to the
# Krichevsky–Trofimov weight (a gross discrepancy costs little), 64·k puts the prior within
# ~1/√(64k) of p (a small discrepancy costs a smaller Occam factor). Their average costs log 3 nats.
DEFAULT_CONCENTRATIONS = (1.0, 8.0, 64.0)
DEFAULT_WIDTHS = (1.0, 0.1)  # Bernoulli mixtures: θ uniform on (b, b + w(1 − b)), averaged over w


class EProcess:
    """Base of the processes here: `update(batch)`, the current `log_e` and its running maximum.

    Subclasses implement `_log_e()` from their sufficient counts; monitoring after every batch is
    monitoring a subsequence of the per-draw martingale, so Ville's inequality still applies.
    """

    def __init__(self) -> None:
        self.n = 0
        self.log_e = 0.0
        self.max_log_e = 0.0

    @property
    def e_value(self) -> float:
        return math.exp(self.log_e) if self.log_e < 700 else math.inf

    @property
    def p_value(self) -> float:
        """Anytime-valid p-value 1/sup_s M_s (Ville)."""
        return math.exp(-self.max_log_e) if self.max_log_e > 0 else 1.0

    def _after_update(self) -> None:
        self.log_e = float(self._log_e())
        self.max_log_e = max(self.max_log_e, self.log_e)

    def _log_e(self) -> float:
        raise NotImplementedError


def _log_mean_exp(terms: list[float]) -> float:
    """log of the average of exp(terms): the log e-value of an equal-weight mixture of processes."""
    return float(np.logaddexp.reduce(terms)) - math.log(len(terms))


def _log_dm_ratio(counts: np.ndarray, p: np.ndarray, concentrations: tuple[float, ...]) -> float:
    """log of the average over c of DM(counts; c·k·p) / Π p^counts, on cells with p > 0 (counts (k,))."""
    n = counts.sum()
    if n == 0:
        return 0.0
    k = len(p)
    null = float(np.sum(counts * np.log(p)))
    terms = []
    for c in concentrations:
        a = c * k * p
        total = c * k
        terms.append(float(np.sum(gammaln(a + counts) - gammaln(a))) - float(gammaln(total + n) - gammaln(total)))
    return _log_mean_exp(terms) - null


class CategoricalEProcess(EProcess):
    """Dirichlet–multinomial mixture likelihood ratio for draws from one categorical with known p.

    p: (k,) probabilities (zeros allowed: a draw there is impossible under H0 and sets e = ∞).
    `update(counts)` takes the (k,) counts of a new batch.
    """

    def __init__(self, p: np.ndarray, concentrations: tuple[float, ...] = DEFAULT_CONCENTRATIONS) -> None:
        super().__init__()
        p = np.asarray(p, dtype=np.float64)
        if p.ndim != 1 or np.any(p < 0) or abs(p.sum() - 1.0) > 1e-8:
            raise ValueError(f"p must be a 1-D probability vector, got shape {p.shape}, sum {p.sum():.6g}")
        self.p = p / p.sum()
        self.support = self.p > 0
        self.concentrations = tuple(concentrations)
        self.counts = np.zeros(len(p), dtype=np.int64)
        self.off_support = 0

    def update(self, counts: np.ndarray) -> CategoricalEProcess:
        counts = np.asarray(counts)
        if counts.shape != self.counts.shape or np.any(counts < 0):
            raise ValueError(f"counts must be non-negative with shape {self.counts.shape}, got {counts.shape}")
        self.counts += counts.astype(np.int64)
        self.n = int(self.counts.sum())
        self.off_support = int(self.counts[~self.support].sum())
        self._after_update()
        return self

    def _log_e(self) -> float:
        if self.off_support:
            return math.inf
        return _log_dm_ratio(self.counts[self.support], self.p[self.support], self.concentrations)


class BernoulliAboveEProcess(EProcess):
    """Tests H0: P(event) ≤ bound with a mixture over θ ∈ (bound, 1]; `update((hits, trials))`.

    bound = 0: any hit is impossible under H0 (e = ∞); bound = 1: nothing can exceed it (e stays 1).
    """

    def __init__(self, bound: float, widths: tuple[float, ...] = DEFAULT_WIDTHS) -> None:
        super().__init__()
        if not 0.0 <= bound <= 1.0:
            raise ValueError(f"bound must be in [0, 1], got {bound}")
        self.bound = float(bound)
        self.widths = tuple(widths)
        self.hits = 0

    def update(self, batch: tuple[int, int]) -> BernoulliAboveEProcess:
        hits, trials = (int(v) for v in batch)
        if not 0 <= hits <= trials:
            raise ValueError(f"need 0 <= hits <= trials, got {hits}, {trials}")
        self.hits += hits
        self.n += trials
        self._after_update()
        return self

    def _log_e(self) -> float:
        b, h, n = self.bound, self.hits, self.n
        if b >= 1.0 or n == 0:
            return 0.0
        if b == 0.0:
            return math.inf if h else 0.0
        x, y = h + 1.0, n - h + 1.0
        null = h * math.log(b) + (n - h) * math.log1p(-b)
        terms = [_log_beta_mass(x, y, b, b + w * (1.0 - b)) - math.log(w * (1.0 - b)) for w in self.widths]
        return _log_mean_exp(terms) + float(betaln(x, y)) - null


def _log_beta_mass(x: float, y: float, lo: float, hi: float) -> float:
    """log of the Beta(x, y) probability of (lo, hi), accurate in either tail."""
    with np.errstate(divide="ignore"):
        if betainc(x, y, hi) < 0.5:  # the mass sits above hi or inside: lower CDFs are accurate
            mass = betainc(x, y, hi) - betainc(x, y, lo)
        else:
            mass = betaincc(x, y, lo) - (betaincc(x, y, hi) if hi < 1.0 else 0.0)
        return float(np.log(max(mass, 0.0)))


class UniformityEProcess(CategoricalEProcess):
    """Values that are U(0, 1) under H0 (e.g. a randomized PIT), binned on fixed `edges`; `update(u)`."""

    def __init__(self, edges: np.ndarray, concentrations: tuple[float, ...] = DEFAULT_CONCENTRATIONS) -> None:
        self.edges = np.asarray(edges, dtype=np.float64)
        if self.edges[0] != 0.0 or self.edges[-1] != 1.0 or np.any(np.diff(self.edges) <= 0):
            raise ValueError("edges must increase strictly from 0 to 1")
        super().__init__(np.diff(self.edges), concentrations)

    def update(self, u: np.ndarray) -> UniformityEProcess:
        return super().update(np.histogram(np.asarray(u, dtype=np.float64), bins=self.edges)[0])


class SerialEProcess(EProcess):
    """Serial independence of U(0, 1) values: bins bet on given the previous value's bin; `update(u)`.

    Consecutive batches continue one sequence (the last bin is carried over), so rows split across
    calls are still paired with their neighbours.
    """

    def __init__(self, n_bins: int = 4, concentrations: tuple[float, ...] = DEFAULT_CONCENTRATIONS) -> None:
        super().__init__()
        self.n_bins = n_bins
        self.p = np.full(n_bins, 1.0 / n_bins)
        self.concentrations = tuple(concentrations)
        self.transitions = np.zeros((n_bins, n_bins), dtype=np.int64)  # [previous bin, this bin]
        self.last: int | None = None

    def update(self, u: np.ndarray) -> SerialEProcess:
        bins = np.minimum((np.asarray(u, dtype=np.float64) * self.n_bins).astype(np.int64), self.n_bins - 1)
        if self.last is not None:
            bins = np.concatenate([[self.last], bins])
        if len(bins):
            np.add.at(self.transitions, (bins[:-1], bins[1:]), 1)
            self.last = int(bins[-1])
        self.n = int(self.transitions.sum())
        self._after_update()
        return self

    def _log_e(self) -> float:
        return sum(_log_dm_ratio(row, self.p, self.concentrations) for row in self.transitions)


def crossing_log_threshold(m: int, false_alarm_rate: float) -> float:
    """log(m/α): a battery of m processes keeps family-wise ≤ α if test i rejects once log e_i ≥ this."""
    if m < 1 or not 0.0 < false_alarm_rate < 1.0:
        raise ValueError(f"need m >= 1 and false_alarm_rate in (0, 1), got {m}, {false_alarm_rate}")
    return math.log(m / false_alarm_rate)


def eprocess_result(process: EProcess, name: str, **details) -> TestResult:
    """The process as a TestResult: statistic = current log e, p-value = 1/sup e (valid at any stopping time)."""
    return TestResult(name, process.log_e, process.p_value, n=process.n,
                      details={"log_e": process.log_e, "max_log_e": process.max_log_e,
                               "kind": type(process).__name__, "anytime_valid": True, **details})
