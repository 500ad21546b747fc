#!/usr/bin/env python3
"""The reference values of report/stats.h, computed by SciPy.

stats_test (C++) reads stats_reference.json and checks report/stats.cc against it. This script
wrote that file, and the `stats_scipy_reference` test runs it again with --check, so the file is
known to hold SciPy's values and not numbers edited by hand:

    stats_reference.py --write tests/report/stats_reference.json   # after changing a case
    stats_reference.py --check tests/report/stats_reference.json   # what the test runs

Holm's adjustment is not in SciPy; it is written here from its definition, separately from the
C++ one. The seeds a t test needs for a power come from statsmodels' power solvers, and the
group-sequential boundaries from SciPy's multivariate normal distribution function (Genz's
algorithm, its randomization seeded), searched look by look: a method independent of the C++
recursion. Needs SciPy and statsmodels (deploy/python-requirements.txt pins them).
"""

import argparse
import json
import math
import sys

import numpy as np
from scipy import optimize, stats

T_CDF = [(-3.2, 2), (0.5, 4), (2.1, 7.3), (10.0, 3), (-0.01, 30), (1.96, 1000), (40.0, 1.5)]
T_QUANTILE = [(0.975, 1), (0.975, 2), (0.975, 3), (0.975, 5), (0.975, 10), (0.975, 29.7),
              (0.9, 4), (0.025, 6), (0.8, 2.5), (0.9995, 2)]
NCT_CDF = [(2.776, 4, 3.0), (-2.776, 4, 3.0), (1.5, 2, 0.5), (4.3, 2, 5.0), (2.0, 10.5, 2.5),
           (12.7, 1, 2.0), (0.0, 3, -1.0)]
ONE_SAMPLE = [
    ([0.805, 0.801, 0.809], 0.9),
    ([1.02, 0.97, 1.11, 1.05, 0.99], 1.0),
    ([-0.41, -0.62, -0.20], 0.0),
    ([3.0, 3.5], 1.0),
]
PAIRED = [
    ([121.0, 118.2, 123.9], [119.5, 118.9, 120.1]),
    ([0.80, 0.81, 0.79, 0.82], [0.90, 0.92, 0.89, 0.93]),
    ([20.35, 20.40, 20.50], [20.14, 20.57, 19.22]),
]
WELCH = [
    ([96.8, 97.4, 95.9], [119.5, 121.0, 120.2]),
    ([1.0, 2.0, 3.0, 4.0], [2.5, 2.7, 2.4]),
    ([0.13, 0.2, 0.11, 0.3, 0.25], [4.24, 4.1]),
]
SPEARMAN = [
    ([64, 64, 64, 128, 128, 128], [0.801, 0.799, 0.803, 0.806, 0.804, 0.808]),
    ([1, 2, 3, 4, 5, 6, 7], [2.0, 1.0, 4.0, 3.0, 7.0, 5.0, 6.0]),
    ([256, 512, 768, 1024], [0.823, 0.814, 0.800, 0.790]),
    ([1, 2, 3, 4, 5], [5.0, 3.0, 4.0, 1.0, 2.0]),
]
HOLM = [
    [0.01, 0.04, 0.03, 0.005],
    [0.2, 0.01],
    [0.5],
    [0.04, 0.04, 0.04],
]
DETECTABLE = [(1.0, 2), (0.37, 4), (2.5, 9.6), (0.05, 29)]
# (standardized effect, design, alpha, power): the n (pairs, or runs per arm) a two-sided t test
# needs, as statsmodels solves it (fractional).
SEEDS_FOR_POWER = [(0.5, "one_sample", 0.05, 0.8), (1.2, "one_sample", 0.05, 0.8),
                   (2.0, "one_sample", 0.0125, 0.9), (0.8, "two_arms", 0.05, 0.8),
                   (1.5, "two_arms", 0.01, 0.8), (3.0, "two_arms", 0.05, 0.95)]
# (b, c, exact): McNemar's test of b items right only under the first and c only under the
# second, as statsmodels computes it.
MCNEMAR = [(3, 9, True), (3, 9, False), (0, 5, True), (12, 12, True), (40, 61, True),
           (40, 61, False), (1, 0, True), (150, 190, False)]
# (information fractions, spending, alpha): two-sided Lan–DeMets boundaries.
SEQUENTIAL = [([0.5, 1.0], "obrien_fleming", 0.05), ([1 / 3, 2 / 3, 1.0], "obrien_fleming", 0.05),
              ([0.2, 0.4, 0.6, 0.8, 1.0], "obrien_fleming", 0.05),
              ([0.4, 0.7, 1.0], "pocock", 0.05), ([0.25, 0.5, 0.75, 1.0], "pocock", 0.05)]
# (fractions, spending, alpha, drift): the chance of first crossing at each look.
CROSSING = [([0.2, 0.4, 0.6, 0.8, 1.0], "obrien_fleming", 0.05, 2.8),
            ([0.4, 0.7, 1.0], "pocock", 0.05, 3.0)]


def holm(p):
    """Holm's step-down adjustment, written from its definition."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p[i]))
        out[i] = running
    return out


def estimate(result, value):
    ci = result.confidence_interval(0.95)
    return {"value": float(value), "low": float(ci.low), "high": float(ci.high),
            "t": float(result.statistic), "p": float(result.pvalue), "df": float(result.df)}


def detectable(se, df, alpha=0.05, power=0.8):
    critical = stats.t.ppf(1 - alpha / 2, df)

    def gap(nc):
        # SciPy's nct.cdf gives NaN for some lower tails below 1e-15; they are 0 to this sum.
        lower = stats.nct.cdf(-critical, df, nc)
        return stats.nct.sf(critical, df, nc) + (0.0 if math.isnan(lower) else lower) - power

    return se * optimize.brentq(gap, 1e-6, 100.0, xtol=1e-13, rtol=1e-13)


def seeds_for_power(d, design, alpha, power):
    from statsmodels.stats.power import TTestIndPower, TTestPower

    if design == "one_sample":
        return float(TTestPower().solve_power(effect_size=d, nobs=None, alpha=alpha, power=power))
    return float(TTestIndPower().solve_power(effect_size=d, nobs1=None, alpha=alpha, power=power))


def mcnemar(b, c, exact):
    from statsmodels.stats.contingency_tables import mcnemar as test

    # The table's diagonal does not enter the test; 10 and 20 stand for it.
    return float(test([[10, b], [c, 20]], exact=exact, correction=True).pvalue)


def spent(spending, alpha, t):
    if spending == "obrien_fleming":
        return 2 * stats.norm.sf(stats.norm.isf(alpha / 2) / math.sqrt(t))
    return alpha * math.log(1 + (math.e - 1) * t)


def staying(fractions, bounds, drift=0.0):
    """P(|Z_j| < bounds[j] for every look j), Z the standardized statistics at the fractions."""
    k = len(bounds)
    if k == 0:
        return 1.0
    t = np.array(fractions[:k])
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    mean = drift * np.sqrt(t)
    b = np.array(bounds)
    return float(stats.multivariate_normal.cdf(b, mean=mean, cov=cov, lower_limit=-b,
                                               maxpts=500_000, abseps=1e-9, releps=1e-9,
                                               rng=np.random.default_rng(7)))


def sequential(fractions, spending, alpha):
    bounds = []
    for k, t in enumerate(fractions):
        target = spent(spending, alpha, t) - (spent(spending, alpha, fractions[k - 1]) if k else 0)
        before = staying(fractions, bounds)
        bounds.append(optimize.brentq(
            lambda c: before - staying(fractions, bounds + [c]) - target, 0.5, 12.0, xtol=1e-9))
    return bounds


def crossing(fractions, spending, alpha, drift):
    bounds = sequential(fractions, spending, alpha)
    stay = [staying(fractions, bounds[:k], drift) for k in range(len(bounds) + 1)]
    return bounds, [stay[k] - stay[k + 1] for k in range(len(bounds))]


def compute():
    return {
        "scipy": __import__("scipy").__version__,
        "t_cdf": [{"t": t, "df": df, "cdf": float(stats.t.cdf(t, df)),
                   "two_sided": float(2 * stats.t.sf(abs(t), df))} for t, df in T_CDF],
        "t_quantile": [{"p": p, "df": df, "t": float(stats.t.ppf(p, df))} for p, df in T_QUANTILE],
        "nct_cdf": [{"t": t, "df": df, "nc": nc, "cdf": float(stats.nct.cdf(t, df, nc))}
                    for t, df, nc in NCT_CDF],
        "one_sample": [dict(x=x, null=null, **estimate(stats.ttest_1samp(x, null),
                                                       np.mean(x)))
                       for x, null in ONE_SAMPLE],
        "paired": [dict(a=a, b=b, **estimate(stats.ttest_rel(a, b),
                                             np.mean(np.array(a) - np.array(b))))
                   for a, b in PAIRED],
        "welch": [dict(a=a, b=b, **estimate(stats.ttest_ind(a, b, equal_var=False),
                                            np.mean(a) - np.mean(b)))
                  for a, b in WELCH],
        "spearman": [{"x": x, "y": y, "r": float(stats.spearmanr(x, y).statistic),
                      "p": float(stats.spearmanr(x, y).pvalue)} for x, y in SPEARMAN],
        "holm": [{"p": p, "adjusted": holm(p)} for p in HOLM],
        "detectable": [{"se": se, "df": df, "effect": detectable(se, df)}
                       for se, df in DETECTABLE],
        "statsmodels": __import__("statsmodels").__version__,
        "seeds_for_power": [{"d": d, "design": design, "alpha": alpha, "power": power,
                             "n": seeds_for_power(d, design, alpha, power)}
                            for d, design, alpha, power in SEEDS_FOR_POWER],
        "mcnemar": [{"b": b, "c": c, "exact": exact, "p": mcnemar(b, c, exact)}
                    for b, c, exact in MCNEMAR],
        "sequential": [{"fractions": f, "spending": sp, "alpha": a,
                        "boundaries": sequential(f, sp, a)} for f, sp, a in SEQUENTIAL],
        "crossing": [dict(fractions=f, spending=sp, alpha=a, drift=drift,
                          **dict(zip(("boundaries", "probabilities"), crossing(f, sp, a, drift))))
                     for f, sp, a, drift in CROSSING],
    }


def close(a, b, path):
    """Recomputed and stored values agree (to rounding of another SciPy build)."""
    if isinstance(a, dict):
        return all(close(a[k], b.get(k), f"{path}.{k}") for k in a
                   if k not in ("scipy", "statsmodels"))
    if isinstance(a, list):
        return len(a) == len(b) and all(close(x, y, f"{path}[{i}]")
                                        for i, (x, y) in enumerate(zip(a, b)))
    if isinstance(a, float) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
        return True
    # The group-sequential values come from a randomized (seeded) integration: another build
    # of SciPy may differ in the sixth digit.
    if isinstance(a, float) and ("sequential" in path or "crossing" in path) and \
            math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7):
        return True
    if a == b:
        return True
    print(f"stats_reference: {path}: SciPy gives {a!r}, the file holds {b!r}", file=sys.stderr)
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE")
    mode.add_argument("--check", metavar="FILE")
    args = parser.parse_args()
    values = compute()
    if args.write:
        with open(args.write, "w") as f:
            json.dump(values, f, indent=1)
            f.write("\n")
        return 0
    with open(args.check) as f:
        stored = json.load(f)
    if not close(values, stored, "reference"):
        return 1
    print(f"stats_reference: {args.check} holds SciPy {values['scipy']}'s values")
    return 0


if __name__ == "__main__":
    sys.exit(main())
