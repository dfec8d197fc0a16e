"""Statistics of interleaved pairs: the median ratio, its distribution-free 95 % interval (the
sign test's) and a reading of that interval against a bar.

On a shared machine whose speed drifts by a third within minutes, two medians taken minutes
apart mostly measure the drift. A pair's two rounds run back to back, so its ratio compares
rounds that saw the same machine; the median of many such ratios, with its interval, says
whether one side is ahead.
"""

from __future__ import annotations

import math
import statistics

from lib import base as bl


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """The k-th smallest and k-th largest value, k the largest rank whose two tails stay within
    ``1 - level``, and the interval's actual coverage. Below 6 values no interval reaches 95 %:
    the whole range comes back with its smaller coverage, and the reading says so."""
    ordered, n = sorted(values), len(values)
    k, tail = 1, 1 / 2**n  # the range: both tails are "every pair on one side"
    while k < n // 2 and 2 * (tail + math.comb(n, k) / 2**n) <= 1 - level:
        tail += math.comb(n, k) / 2**n
        k += 1
    return ordered[k - 1], ordered[n - k], 1 - 2 * tail


# How a reading names the interval at or above the bar, below it, and across it.
EQUAL_WORDS = ("ours at least equal", "ours slower", "level")
GOAL_WORDS = ("met", "not met", "undecided")


def verdict(
    low: float,
    high: float,
    coverage: float,
    *,
    bar: float = 1.0,
    words: tuple[str, str, str] = EQUAL_WORDS,
    level: float = 0.95,
) -> str:
    if coverage < level:
        return (
            f"too few pairs for a {level * 100:.0f} % interval "
            f"(the range covers {coverage * 100:.0f} %)"
        )
    at = f"{bar * 100:.0f} %"
    if low >= bar:
        return f"{words[0]} (the interval is at or above {at})"
    if high < bar:
        return f"{words[1]} (the interval is below {at})"
    return f"{words[2]} (the interval holds {at})"


def ratio_row(
    label: str,
    ratios: list[float],
    *,
    bar: float = 1.0,
    words: tuple[str, str, str] = EQUAL_WORDS,
) -> list[str]:
    """One summary row of paired ratios: median, its interval, range, how many pairs reached
    ``bar``, and the reading against it."""
    low, high, coverage = median_interval(ratios)
    return [
        label,
        f"{statistics.median(ratios):.1%}",
        f"{low:.1%} - {high:.1%} ({coverage:.1%})",
        f"{min(ratios):.1%} - {max(ratios):.1%}",
        f"{sum(r >= bar for r in ratios)} of {len(ratios)}",
        verdict(low, high, coverage, bar=bar, words=words),
    ]


def ratio_table(rows: list[list[str]], bar: float = 1.0) -> str:
    """The summary table of ``ratio_row`` rows."""
    headers = ["ratio", "median of pairs", "95 % interval of the median (its coverage)", "range"]
    return bl.table([*headers, f"pairs at or above {bar:.0%}", "reading"], rows)


INTERVAL_NOTE = (
    "The interval is the sign test's distribution-free 95 % confidence interval of the median "
    "ratio (order statistics of the pairs; no assumption about the noise's shape)."
)


def order(n: int, sides: tuple[str, ...]) -> tuple[str, ...]:
    """The sides of pair ``n`` (from 1): as given, reversed every other pair, so no side always
    goes first."""
    return sides if n % 2 else sides[::-1]
