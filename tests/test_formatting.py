"""Counts as people read them (``fitting.formatting.count``)."""

from __future__ import annotations

from flops_fit.fitting import formatting as fmt


def test_a_count_takes_its_suffix_after_rounding_and_reads_as_a_power_of_ten_past_the_last():
    """999,700 parameters read 1e+03k and 1e15 tokens 1e+03T (`fit --predict 1e30` printed a D_opt of
    1.78e+07T tokens): the suffix was chosen before rounding, and nothing came after T."""
    assert [fmt.count(v) for v in (999.6, 999_700, 999.7e9, 999.7e12, 1.78e19)] == ["1k", "1M", "1T", "1e+15", "1.78e+19"]
    assert [fmt.count(v) for v in (0.0331, 4628, 12_345, 1.23e6, 45.6e9, 2.1e12, -5e3)] == \
        ["0.0331", "4.63k", "12.3k", "1.23M", "45.6B", "2.1T", "-5k"]
    assert fmt.count(float("nan")) == "nan" and fmt.count(999_400, 2) == "1M"
