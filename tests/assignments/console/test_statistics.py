"""assignments/console/statistics.py against values computed elsewhere: scipy, closed forms, worked examples."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assignments.console.statistics import chi_square_sf, regularized_gamma_q, sample_ratio_test

# (statistic, degrees of freedom, scipy.stats.chi2.sf(statistic, df)) from scipy 1.17.1.
SCIPY_CHI2_SF = [
    (3.84, 1, 0.05004352124870519),
    (10, 3, 0.01856613546304325),
    (0.5, 2, 0.7788007830714049),
    (1, 1, 0.31731050786291115),
    (0.001, 1, 0.9747728793699604),
    (100, 1, 1.5239706048320995e-23),
    (20, 10, 0.029252688076961124),
    (50, 5, 1.3857973367009573e-09),
    (3, 4, 0.5578254003710748),
    (2, 3, 0.5724067044708798),
    (4, 2, 0.1353352832366127),
    (1000, 999, 0.48513148927490146),
    (1100, 1000, 0.014614408126295192),
    (900, 1000, 0.9892827619087102),
    (101000, 100000, 0.012868840377233648),
]


def closed_form_sf(statistic: float, degrees_of_freedom: int) -> float:
    """chi2.sf by the textbook closed forms, sharing nothing with the module under test.

    Even df = 2k: Q(k, y) = e^-y * sum_{i<k} y^i / i!. Odd df: Q(1/2, y) = erfc(sqrt(y)),
    then Q(a + 1, y) = Q(a, y) + y^a e^-y / Gamma(a + 1).
    """
    y = statistic / 2
    if degrees_of_freedom % 2 == 0:
        return math.fsum(math.exp(i * math.log(y) - y - math.lgamma(i + 1)) for i in range(degrees_of_freedom // 2))
    terms = [math.erfc(math.sqrt(y))]
    a = 0.5
    while a < degrees_of_freedom / 2:
        terms.append(math.exp(a * math.log(y) - y - math.lgamma(a + 1)))
        a += 1
    return math.fsum(terms)


@pytest.mark.parametrize(("statistic", "degrees_of_freedom", "expected"), SCIPY_CHI2_SF)
def test_chi_square_sf__scipy_reference_values__agree_to_nine_digits(statistic, degrees_of_freedom, expected):
    assert chi_square_sf(statistic, degrees_of_freedom) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("degrees_of_freedom", [1, 2, 7, 1000])
def test_chi_square_sf__zero_statistic__is_one(degrees_of_freedom):
    assert chi_square_sf(0, degrees_of_freedom) == 1.0


def test_chi_square_sf__statistic_far_in_the_tail__underflows_to_zero_not_an_error():
    assert chi_square_sf(1500, 1) == 0.0
    assert chi_square_sf(math.inf, 3) == 0.0


def test_chi_square_sf__tiny_statistic_many_degrees__is_one_within_rounding():
    assert chi_square_sf(0.1, 30) == pytest.approx(1.0, abs=1e-15)


@given(
    statistic=st.floats(min_value=1e-6, max_value=400, allow_nan=False),
    degrees_of_freedom=st.integers(min_value=1, max_value=120),
)
def test_chi_square_sf__any_statistic_and_degrees__matches_the_closed_form(statistic, degrees_of_freedom):
    expected = closed_form_sf(statistic, degrees_of_freedom)
    assert chi_square_sf(statistic, degrees_of_freedom) == pytest.approx(expected, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("a", [0.5, 3.0, 50.0])
def test_regularized_gamma_q__either_side_of_the_method_switch__is_continuous(a):
    # Given x just below and just above a + 1, where the series hands over to the continued fraction
    below = regularized_gamma_q(a, (a + 1) * (1 - 1e-12))
    above = regularized_gamma_q(a, a + 1)

    # Then the two methods agree there
    assert below == pytest.approx(above, rel=1e-9)


@pytest.mark.parametrize(("statistic", "degrees_of_freedom"), [(-1, 1), (math.nan, 1), (1, 0), (1, -2)])
def test_chi_square_sf__out_of_domain__raises_value_error(statistic, degrees_of_freedom):
    with pytest.raises(ValueError):
        chi_square_sf(statistic, degrees_of_freedom)


@pytest.mark.parametrize(
    ("observed", "shares", "statistic", "p_value"),
    [
        # scipy.stats.chisquare(observed, expected counts) for each
        ([5120, 4880], [0.5, 0.5], 5.76, 0.01639507184919225),
        ([480, 260, 260], [0.5, 0.25, 0.25], 1.6, 0.4493289641172217),
        ([30, 70], [0.5, 0.5], 16.0, 6.334248366623988e-05),
    ],
)
def test_sample_ratio_test__worked_examples__match_scipy_chisquare(observed, shares, statistic, p_value):
    result = sample_ratio_test(observed=observed, expected_shares=shares)

    assert result is not None
    assert result.statistic == pytest.approx(statistic, rel=1e-12)
    assert result.degrees_of_freedom == len(observed) - 1
    assert result.p_value == pytest.approx(p_value, rel=1e-9)


def test_sample_ratio_test__zero_share_variant_unused__carries_no_degree_of_freedom():
    # Given a variant switched off (share 0) that got no subjects
    result = sample_ratio_test(observed=[5120, 4880, 0], expected_shares=[0.5, 0.5, 0.0])

    # Then it is as if it were not there
    assert result is not None
    assert result.degrees_of_freedom == 1
    assert result.p_value == pytest.approx(0.01639507184919225, rel=1e-9)


def test_sample_ratio_test__subjects_in_a_zero_share_variant__p_value_zero():
    result = sample_ratio_test(observed=[500, 499, 1], expected_shares=[0.5, 0.5, 0.0])

    assert result is not None
    assert result.p_value == 0.0
    assert result.statistic == math.inf


def test_sample_ratio_test__single_variant_expected__p_value_one():
    result = sample_ratio_test(observed=[0, 42], expected_shares=[0.0, 1.0])

    assert result is not None
    assert result.degrees_of_freedom == 0
    assert result.p_value == 1.0


def test_sample_ratio_test__shares_summing_to_one_only_within_rounding__are_normalised():
    # Given splits that sum to 1 - 1e-7 (the configuration allows 1e-6) and counts exactly proportional
    result = sample_ratio_test(observed=[1000, 2000], expected_shares=[0.3333333, 0.6666666])

    # Then the counts fit perfectly
    assert result is not None
    assert result.statistic == pytest.approx(0.0, abs=1e-9)
    assert result.p_value == pytest.approx(1.0, abs=1e-9)


def test_sample_ratio_test__nothing_observed__is_none():
    assert sample_ratio_test(observed=[0, 0], expected_shares=[0.5, 0.5]) is None


@pytest.mark.parametrize(
    ("observed", "shares"),
    [([1, 2], [1.0]), ([-1, 2], [0.5, 0.5]), ([1, 2], [0.0, 0.0]), ([1, 2], [-0.5, 1.5])],
)
def test_sample_ratio_test__inconsistent_input__raises_value_error(observed, shares):
    with pytest.raises(ValueError):
        sample_ratio_test(observed=observed, expected_shares=shares)
