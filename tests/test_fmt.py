import math

from kforge.tools.fmt import geomean, ms, num, ratio


def test_missing_values_print_as_a_dash() -> None:
    assert num(None) == ms(None) == ratio(None) == "-"


def test_figures() -> None:
    assert num(1.23456, "x", 3) == "1.23x"
    assert ms(0.123456) == "0.1235 ms"
    assert ratio(1.5) == "1.50x"


def test_geomean_skips_what_has_no_logarithm() -> None:
    assert geomean([]) is None
    assert geomean([0.0, None, -1.0, math.nan]) is None
    assert math.isclose(geomean([2.0, 8.0, None]) or 0, 4.0)
