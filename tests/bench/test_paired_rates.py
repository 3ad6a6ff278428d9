"""The same-run comparisons of the live benches (bench/results.py): rotating
orders and ratios taken per round."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
try:
    from results import Figure, paired_rates, rotations
finally:
    sys.path.remove(str(BENCH))


def test_rotations_put_each_contender_in_each_place() -> None:
    """Over as many rounds as contenders, each one runs first, middle and last once."""
    orders = rotations(["relay", "fencewatch", "peer"], 3)
    assert orders == [
        ["relay", "fencewatch", "peer"],
        ["fencewatch", "peer", "relay"],
        ["peer", "relay", "fencewatch"],
    ]
    for place in range(3):
        assert sorted(order[place] for order in orders) == ["fencewatch", "peer", "relay"]


def test_rotations_wrap_past_the_contender_count() -> None:
    """A fourth round of three contenders starts over; two contenders alternate."""
    assert rotations(["a", "b", "c"], 4)[3] == ["a", "b", "c"]
    assert rotations(["1", "2"], 3) == [["1", "2"], ["2", "1"], ["1", "2"]]
    assert rotations([], 2) == [[], []]


def test_paired_ratio_is_the_median_of_the_rounds_ratios() -> None:
    """A machine twice as fast in one round moves both sides of that round,
    not the figure: the ratio is taken per round, then the median."""
    rounds = [
        {"fencewatch": 100.0, "relay": 100.0},
        {"fencewatch": 90.0, "relay": 100.0},
        {"fencewatch": 400.0, "relay": 500.0},
    ]
    pr = paired_rates(rounds, "fencewatch", "relay")
    assert pr.ratio == pytest.approx(0.9)
    assert pr.value == 100.0 and pr.limit == 100.0  # the ratio of medians would say 1.0
    assert pr.runs == [100.0, 90.0, 400.0]
    assert pr.limit_runs == [100.0, 100.0, 500.0]
    fig = Figure("x", pr.value, "events/s", "relay", pr.limit, "ratio >= 0.9",
                 paired_ratio=pr.ratio)  # fmt: skip
    assert fig.to_dict()["ratio"] == pytest.approx(0.9)


def test_paired_rates_refuse_no_rounds_and_a_zero_limit() -> None:
    """No round, or a round whose limit measured nothing, is an error, not a figure."""
    with pytest.raises(ValueError, match="no rounds"):
        paired_rates([], "a", "b")
    with pytest.raises(ValueError, match="b: a round measured no rate"):
        paired_rates([{"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 0.0}], "a", "b")
