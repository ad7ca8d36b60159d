"""The chi-square sample-ratio-mismatch test, in plain Python (no Django, no scipy).

The chi-square survival function is the regularized upper incomplete gamma
function: P(X >= x) = Q(df / 2, x / 2). Q is computed as in Numerical Recipes
(gammq): by its power series below x = a + 1, where that converges fast, and
by a continued fraction (modified Lentz) above, where the series would not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Relative precision at which a series or fraction counts as converged: near
# double precision, so the result carries about 13 correct digits.
EPSILON = 1e-15
# Both expansions need O(sqrt(a)) steps near x = a; this bound allows degrees of
# freedom far beyond any experiment's variant count and only stops a runaway loop.
MAX_ITERATIONS = 100_000
# Stands in for zero in the Lentz recurrence, which divides by its terms.
TINY = 1e-300


@dataclass(frozen=True)
class SampleRatioTest:
    """Outcome of a chi-square goodness-of-fit test of observed counts against expected shares."""

    statistic: float
    degrees_of_freedom: int
    p_value: float


def chi_square_sf(statistic: float, degrees_of_freedom: int) -> float:
    """P(X >= statistic) for X chi-square distributed with the given degrees of freedom."""
    if degrees_of_freedom < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {degrees_of_freedom}")
    if math.isnan(statistic) or statistic < 0:
        raise ValueError(f"a chi-square statistic is a non-negative number, got {statistic}")
    return regularized_gamma_q(degrees_of_freedom / 2, statistic / 2)


def regularized_gamma_q(a: float, x: float) -> float:
    """Q(a, x) = Gamma(a, x) / Gamma(a), for a > 0 and x >= 0."""
    if not a > 0:
        raise ValueError(f"a must be positive, got {a}")
    if math.isnan(x) or x < 0:
        raise ValueError(f"x must be non-negative, got {x}")
    if x == 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    if x < a + 1:
        # Here Q is not small, so 1 - P loses no significant digits.
        return max(0.0, 1.0 - _lower_gamma_series(a, x))
    return _upper_gamma_continued_fraction(a, x)


def _power_prefactor(a: float, x: float) -> float:
    """x**a * e**-x / Gamma(a), through logarithms so that neither factor overflows."""
    return math.exp(a * math.log(x) - x - math.lgamma(a))


def _lower_gamma_series(a: float, x: float) -> float:
    """P(a, x) = 1 - Q(a, x) by its power series (Numerical Recipes gser)."""
    denominator = a
    term = total = 1.0 / a
    for _ in range(MAX_ITERATIONS):
        denominator += 1
        term *= x / denominator
        total += term
        if abs(term) < abs(total) * EPSILON:
            return total * _power_prefactor(a, x)
    raise ArithmeticError(f"incomplete gamma series did not converge for a={a}, x={x}")


def _upper_gamma_continued_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction, evaluated with the modified Lentz method (Numerical Recipes gcf)."""
    b = x + 1 - a
    c = 1 / TINY
    d = 1 / b
    fraction = d
    for i in range(1, MAX_ITERATIONS + 1):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        if abs(d) < TINY:
            d = TINY
        c = b + an / c
        if abs(c) < TINY:
            c = TINY
        d = 1 / d
        step = d * c
        fraction *= step
        if abs(step - 1) < EPSILON:
            return _power_prefactor(a, x) * fraction
    raise ArithmeticError(f"incomplete gamma continued fraction did not converge for a={a}, x={x}")


def sample_ratio_test(*, observed: Sequence[int], expected_shares: Sequence[float]) -> SampleRatioTest | None:
    """Chi-square goodness of fit of observed counts to expected shares; None when nothing was observed.

    Shares are normalised by their sum (configured splits sum to 1 only within
    1e-6). Categories with an expected share of 0 carry no degree of freedom; any
    count in one is a mismatch no sampling explains, so the p-value is 0. With a
    single category expected, every count falls in it and the p-value is 1.
    """
    if len(observed) != len(expected_shares):
        raise ValueError(f"{len(observed)} observed counts for {len(expected_shares)} expected shares")
    if any(count < 0 for count in observed) or any(not share >= 0 for share in expected_shares):
        raise ValueError("counts and shares must be non-negative")
    total = sum(observed)
    share_sum = math.fsum(expected_shares)
    if share_sum <= 0:
        raise ValueError("at least one expected share must be positive")
    if total == 0:
        return None
    degrees_of_freedom = sum(1 for share in expected_shares if share > 0) - 1
    if any(count > 0 and share == 0 for count, share in zip(observed, expected_shares, strict=True)):
        return SampleRatioTest(statistic=math.inf, degrees_of_freedom=degrees_of_freedom, p_value=0.0)
    statistic = math.fsum(
        (count - total * share / share_sum) ** 2 / (total * share / share_sum)
        for count, share in zip(observed, expected_shares, strict=True)
        if share > 0
    )
    if degrees_of_freedom == 0:
        return SampleRatioTest(statistic=statistic, degrees_of_freedom=0, p_value=1.0)
    return SampleRatioTest(
        statistic=statistic,
        degrees_of_freedom=degrees_of_freedom,
        p_value=chi_square_sf(statistic, degrees_of_freedom),
    )
