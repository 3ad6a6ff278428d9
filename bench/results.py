"""Machine-readable figures of the benchmarks (``--json FILE``), and the
convention by which ``make bench`` (``bench/run_all.py``) finds them.

A script in ``bench/`` joins ``make bench`` when one of its first 40 lines is

    # make-bench: [ARGS...]

(``ARGS`` are its arguments for that run, possibly none). It must accept
``--json FILE`` and, when given, write its figures there with :func:`emit`.
Helpers (like this module) carry no such line. Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = [
    "Figure",
    "PairedRates",
    "add_json_arg",
    "add_paced_args",
    "emit",
    "paired_rates",
    "rotations",
]


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure beside the limit measured in the same run.

    ``ratio`` is ``value / limit`` (so for times, lower is better; for rates,
    higher is). ``target`` is ``"<field> <op> <number>"`` with field ``value``
    or ``ratio`` and op ``<=`` or ``>=`` (e.g. ``"ratio >= 0.5"``); the runner
    evaluates it.

    ``limit_kind`` is ``"measured"`` (the limit was measured in the same run)
    or ``"configured"`` (a setting of the run, such as a session timeout): the
    documents label the second kind so that it is never read as a measurement.

    ``runs`` and ``limit_runs``: the figure and its limit in each of several
    runs, when ``value`` and ``limit`` summarize them (a median); the
    documents show their spread beside the value.

    ``paired_ratio``: when each run measured the figure and its limit side
    by side (a pair), the median of the per-pair ratios. It is then the
    ``ratio`` (shown and judged): drift in the machine's speed between
    pairs cancels out in each pair, not in a ratio of two medians.
    """

    name: str
    value: float
    unit: str
    limit_name: str | None = None
    limit: float | None = None
    target: str | None = None
    note: str = ""
    limit_kind: str = "measured"
    runs: list[float] | None = None
    limit_runs: list[float] | None = None
    paired_ratio: float | None = None

    def __post_init__(self) -> None:
        if self.limit_kind not in ("measured", "configured"):
            raise ValueError(
                f"limit_kind must be 'measured' or 'configured', not {self.limit_kind!r}"
            )

    @property
    def ratio(self) -> float | None:
        if self.paired_ratio is not None:
            return self.paired_ratio
        if self.limit is None or self.limit == 0:
            return None
        return self.value / self.limit

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["ratio"] = self.ratio
        return out


def add_paced_args(ap: argparse.ArgumentParser) -> None:
    """The paced-load flags the latency benches share (same defaults, so
    their figures compare)."""
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--commit-interval", default="0.1")


def add_json_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json", type=Path, help="also write the figures to this file (make bench)")


def emit(path: Path | None, figures: list[Figure]) -> None:
    """Write ``figures`` to ``path`` as ``{"figures": [...]}``; nothing if None."""
    if path is None:
        return
    path.write_text(json.dumps({"figures": [f.to_dict() for f in figures]}, indent=2) + "\n")


def rotations(names: list[str], rounds: int) -> list[list[str]]:
    """``rounds`` orders of ``names``, each the one before rotated by one (A B
    C, B C A, C A B, A B C...): each contender takes each place in turn, so a
    load that builds or fades within a round is shared out among them."""
    if not names:
        return [[] for _ in range(rounds)]
    return [names[r % len(names) :] + names[: r % len(names)] for r in range(rounds)]


@dataclass(frozen=True, slots=True)
class PairedRates:
    """Two contenders measured in the same rounds: the median of each, their
    rates per round, and the median of the per-round ratios (``Figure``'s
    ``paired_ratio``: drift between rounds cancels within each round)."""

    value: float
    limit: float
    ratio: float
    runs: list[float]
    limit_runs: list[float]


def paired_rates(rounds: list[dict[str, float]], num: str, den: str) -> PairedRates:
    """``num`` against ``den`` over ``rounds`` (one dict of rates per round,
    by contender); ValueError without a round, or with a rate of 0 for ``den``."""
    if not rounds:
        raise ValueError("no rounds measured")
    nums = [r[num] for r in rounds]
    dens = [r[den] for r in rounds]
    if any(d <= 0 for d in dens):
        raise ValueError(f"{den}: a round measured no rate")
    ratio = statistics.median(a / b for a, b in zip(nums, dens, strict=True))
    return PairedRates(statistics.median(nums), statistics.median(dens), ratio, nums, dens)
