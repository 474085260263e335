"""How counts of parameters and tokens read in every table and note."""

from __future__ import annotations

import pytest

from flops_fit.fitting.formatting import count


@pytest.mark.parametrize(("value", "text"), [
    (999.7e9, "1T"),        # read "1e+03B"
    (999.7, "1k"),          # read "1e+03"
    (1e15, "1e+15"),        # read "1e+03T" (sizing for 1e15 inference tokens, a planned run of 1e15 parameters)
    (1e18, "1e+18"),        # read "1e+06T"
    (1e300, "1e+300"),      # read "1e+288T"
    (999_700, "1M"),        # read "1e+03k"
    (1.78e19, "1.78e+19"),  # read "1.78e+07T" (`fit --predict 1e30`'s D_opt)
    (2.5e12, "2.5T"), (45.6e9, "45.6B"), (1.23e6, "1.23M"), (1234.0, "1.23k"), (999.0, "999"), (0.219, "0.219"),
    (-5e3, "-5k"), (float("nan"), "nan"),
])
def test_a_count_reads_in_the_largest_suffix_it_rounds_to(value, text):
    assert count(value) == text


def test_a_count_rounds_to_its_digits_before_its_suffix():
    assert count(999_400, 2) == "1M" and count(999_400) == "999k"
