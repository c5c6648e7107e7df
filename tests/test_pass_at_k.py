"""pass@k, pass^k and intervals against brute force, exact fractions and hand numbers."""
import itertools
import math
from fractions import Fraction

import pytest

from agentgym_nb.evaluate import avg_at_k, mean_ci, pass_at_k, pass_hat_k, wilson_interval

pytestmark = pytest.mark.timeout(60)


def brute(n, c, k, agg):
    """Share of all k-subsets of n samples (c successes) where agg(subset) holds."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return sum(agg(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_against_all_k_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute(n, c, k, any), abs=1e-12)
            assert pass_hat_k(n, c, k) == pytest.approx(brute(n, c, k, all), abs=1e-12)


def test_hand_numbers():
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = .7;  pass^2 = C(2,2)/C(5,2) = .1
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 = c/n


def test_edges():
    assert pass_at_k(10, 0, 3) == 0.0 and pass_hat_k(10, 0, 3) == 0.0   # c = 0
    assert pass_at_k(10, 0, 10) == 0.0 and pass_hat_k(10, 10, 10) == 1.0   # k = n
    assert pass_at_k(10, 10, 3) == 1.0 and pass_hat_k(10, 10, 3) == 1.0
    assert pass_at_k(10, 1, 10) == 1.0  # k = n: any success in all samples
    assert pass_hat_k(10, 9, 10) == 0.0
    assert f"{pass_hat_k(4, 1, 3):.3f}" == "0.000"   # fewer successes than k: 0, not the product's -0.0
    assert pass_at_k(10, 2, 9) == 1.0  # n - c = 8 < k: every 9-subset holds a success


def test_large_n_is_stable():
    # C(1000, 500) overflows a float; the product form does not. 1 - C(998,10)/C(1000,10) by exact integers:
    exact = 1 - math.comb(998, 10) / math.comb(1000, 10)
    assert pass_at_k(1000, 2, 10) == pytest.approx(exact, rel=1e-12)
    assert 0.0 < pass_at_k(2000, 3, 500) < 1.0


@pytest.mark.parametrize("n, c, k", [(5000, 37, 100), (100_000, 1, 1000), (3000, 2900, 50), (10**6, 10, 10**5)])
def test_large_n_against_exact_fractions(n, c, k):
    # C(n, k) here has up to ~10^5 digits: no float binomial survives, exact integers and the product forms do.
    exact_at = 1 - Fraction(math.comb(n - c, k), math.comb(n, k)) if k <= 1000 else None
    if exact_at is not None:
        assert pass_at_k(n, c, k) == pytest.approx(float(exact_at), rel=1e-9)
        assert pass_hat_k(n, c, k) == pytest.approx(float(Fraction(math.comb(c, k), math.comb(n, k))), rel=1e-9,
                                                    abs=1e-300)
    else:   # 1 - (1 - k/n)^... : with 10 successes in 10^6 and k = 10^5, pass@k = 1 - prod (1 - k/i) ~ 1 - 0.9^10
        assert pass_at_k(n, c, k) == pytest.approx(1 - math.prod(1 - k / i for i in range(n - c + 1, n + 1)))
        assert pass_at_k(n, c, k) == pytest.approx(1 - 0.9 ** 10, rel=1e-5)


def test_avg_at_k():
    assert avg_at_k([100, 0, 50, 30]) == 45.0   # SciWorld scores: avg@4 keeps partial credit
    assert avg_at_k([1.0]) == 1.0
    with pytest.raises(ValueError, match="at least one"):
        avg_at_k([])


@pytest.mark.parametrize("n, c, k", [(5, 1, 6), (5, 1, 0), (5, 6, 1), (5, -1, 1), (-1, 0, 1), (0, 0, 0)])
def test_errors(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError):
        pass_hat_k(n, c, k)


def test_wilson_interval():
    # 8/10, z = 1.96: center = (.8 + 1.9208/10)/(1 + .38416) = .99208/1.38416 = .716738
    # half = 1.96*sqrt(.16/10 + 3.8416/400)/1.38416 = 1.96*sqrt(.025604)/1.38416 = 1.96*.160012/1.38416 = .226581
    lo, hi = wilson_interval(8, 10)
    assert (lo, hi) == (pytest.approx(0.490157, abs=1e-5), pytest.approx(0.943319, abs=1e-5))
    lo, hi = wilson_interval(0, 10)  # not the empty interval [0, 0] of p +- z*se
    assert lo == 0.0 and hi == pytest.approx(3.8416 / 13.8416, abs=1e-9)  # z^2/(n + z^2)
    for n in range(1, 200):   # exactly p at the ends: 0/27 gave lo = 6.9e-18 > p, and an error bar of -6.9e-18
        assert wilson_interval(0, n)[0] == 0.0 and wilson_interval(n, n)[1] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(3, 0)
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_mean_ci():
    # [1, 2, 3, 4]: mean 2.5, unbiased s = sqrt(5/3) = 1.290994, se = s/2 = .645497, z*se = 1.265174
    lo, hi = mean_ci([1, 2, 3, 4])
    assert (lo, hi) == (pytest.approx(2.5 - 1.265174, abs=1e-6), pytest.approx(2.5 + 1.265174, abs=1e-6))
    with pytest.raises(ValueError, match="at least 2"):
        mean_ci([1.0])
