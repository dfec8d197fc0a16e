"""Single-job enqueue against django-tasks-db, measured in interleaved pairs (goal 6b).

throughput.py measures the enqueue once per repeat, between drain rounds, and compares the
medians of the two sides. On a machine whose speed drifts by a third within minutes, the two
medians come from different moments and the ratio mostly measures the drift. Here the sides
take turns in short rounds, back to back, and every round of ours is compared with the peer's
rounds next to it:

  ours           N ``create_job`` calls, one commit each (``bench/ourside.py enqueue``), on a
                 database that keeps every earlier round's jobs and events
  peer           N ``Task.enqueue()`` calls on django-tasks-db (its own venv), on a table that
                 keeps its earlier rounds' rows
  peer fresh     the same on a freshly migrated database each round (setup, not measured)

A pair is one round of each, in the order ours, peer, peer fresh or its reverse (alternating),
so neither side always goes first. Before the pairs, both kept databases get ``--history`` rows
(bulk-loaded, the rows an enqueue writes), so "history" means the same on both sides from the
first pair. The result gives each pair's ratios, their median and spread, and how many pairs
ours won: with the sides alternating, a machine that slows down or speeds up moves both sides
of a pair alike.

    .venv/bin/python bench/enqueue_pairs.py                    # SQLite, 15 pairs of 2,000
    .venv/bin/python bench/enqueue_pairs.py --backend pg --pairs 9
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from dataclasses import dataclass

import benchlib as bl
import throughput as tp

GOALS = {
    "sqlite": "Goal 6b (issue 15): single-job enqueue on SQLite at least equal to the peer's.",
    "pg": "Goal 2 (issue 15): single-job `create_job` on PostgreSQL at least equal to the "
    "peer's `Task.enqueue()`.",
}


@dataclass
class Pair:
    ours: float
    peer: float
    fresh: float

    @property
    def vs_peer(self) -> float:
        return self.ours / self.peer

    @property
    def vs_fresh(self) -> float:
        return self.ours / self.fresh


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """A distribution-free confidence interval of the median (the sign test's): the k-th
    smallest and k-th largest value, k the largest rank whose two tails stay within
    ``1 - level``; and the interval's actual coverage. Below 6 values no interval reaches 95 %:
    the whole range is returned with its smaller coverage, and the reading says so."""
    ordered, n = sorted(values), len(values)
    k, tail = 1, 1 / 2**n  # the range: both tails are "every pair on one side"
    while k < n // 2 and 2 * (tail + math.comb(n, k) / 2**n) <= 1 - level:
        tail += math.comb(n, k) / 2**n
        k += 1
    return ordered[k - 1], ordered[n - k], 1 - 2 * tail


# How a reading names the interval at or above the bar, below it, and across it.
EQUAL_WORDS = ("ours at least equal", "ours slower", "level")


def verdict(
    low: float,
    high: float,
    coverage: float,
    level: float = 0.95,
    *,
    bar: float = 1.0,
    words: tuple[str, str, str] = EQUAL_WORDS,
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
    counted: str,
    *,
    bar: float = 1.0,
    words: tuple[str, str, str] = EQUAL_WORDS,
) -> list[str]:
    """One summary row of paired ratios: median, its interval, range, ``counted`` (how many
    pairs passed, as the caller counts them) and the reading against ``bar``."""
    low, high, coverage = median_interval(ratios)
    return [
        label,
        f"{statistics.median(ratios):.1%}",
        f"{low:.1%} - {high:.1%} ({coverage:.1%})",
        f"{min(ratios):.1%} - {max(ratios):.1%}",
        counted,
        verdict(low, high, coverage, bar=bar, words=words),
    ]


def ratio_table(rows: list[list[str]], counted: str) -> str:
    """The summary table of ``ratio_row`` rows; ``counted`` names their fifth column."""
    headers = ["ratio", "median of pairs", "95 % interval of the median (its coverage)", "range"]
    return bl.table([*headers, counted, "reading"], rows)


def databases(backend: str) -> dict[str, str]:
    """The three databases, fresh and migrated (setup)."""
    urls = {}
    for side in ("ours", "peer", "fresh"):
        name = bl.db_name(f"ep_{side}")
        if backend == "pg":
            bl.recreate_pg_db(name)
            urls[side] = bl.pg_url(name)
        else:
            path = bl.VAR / f"{name}.sqlite3"
            bl.fresh_sqlite(path)
            urls[side] = bl.sqlite_url(path)
    bl.migrate(urls["ours"])
    tp.migrate_peer(urls["peer"])
    return urls


def fresh_peer(backend: str, url: str) -> None:
    name = bl.db_name("ep_fresh")
    if backend == "pg":
        bl.recreate_pg_db(name)
    else:
        bl.fresh_sqlite(bl.VAR / f"{name}.sqlite3")
    tp.migrate_peer(url)


def measure(backend: str, urls: dict[str, str], side: str, jobs: int, mission: str) -> float:
    """One round of one side: single-job enqueues a second, timed inside the process."""
    if side == "ours":
        out = tp.ours_json(
            urls["ours"], "enqueue", "--n", str(jobs), "--mission", mission, "--mode", "per-commit"
        )
    else:
        if side == "fresh":
            fresh_peer(backend, urls["fresh"])
        out = tp.peer_json(urls[side], "enqueue", "--n", str(jobs), "--mode", "per-commit")
    return float(out["per_s"])


def run(args: argparse.Namespace) -> list[Pair]:
    tp.ensure_peer_venv()
    urls = databases(args.backend)
    if args.history:
        bl.say(f"history: {args.history:,} rows into ours and the peer's kept table …")
        tp.ours_json(urls["ours"], "load", "--n", str(args.history), "--mission", "ep-history")
        tp.peer_json(urls["peer"], "load", "--n", str(args.history))
    # One unmeasured round each: the files and caches exist before the first pair.
    measure(args.backend, urls, "ours", 100, "ep-warmup")
    measure(args.backend, urls, "peer", 100, "")
    pairs = []
    for n in range(1, args.pairs + 1):
        order = ("ours", "peer", "fresh") if n % 2 else ("fresh", "peer", "ours")
        got = {side: measure(args.backend, urls, side, args.jobs, f"ep-{n}") for side in order}
        pair = Pair(got["ours"], got["peer"], got["fresh"])
        pairs.append(pair)
        bl.say(
            f"  pair {n:2}: ours {pair.ours:7,.0f}  peer {pair.peer:7,.0f}  fresh "
            f"{pair.fresh:7,.0f}  ratios {pair.vs_peer:5.0%} / {pair.vs_fresh:5.0%}"
        )
    if not args.keep_dbs and args.backend == "pg":
        for side in ("ours", "peer", "fresh"):
            bl.drop_pg_db(bl.db_name(f"ep_{side}"))
    return pairs


def summary_rows(pairs: list[Pair]) -> list[list[str]]:
    return [
        ratio_row(label, ratios, f"{sum(r > 1 for r in ratios)} of {len(ratios)}")
        for label, ratios in (
            ("ours / peer (history)", [p.vs_peer for p in pairs]),
            ("ours / peer (fresh)", [p.vs_fresh for p in pairs]),
        )
    ]


def report(pairs: list[Pair], args: argparse.Namespace) -> list[str]:
    db = "PostgreSQL" if args.backend == "pg" else "SQLite"
    out = [
        f"{db}, {args.pairs} pairs of {args.jobs:,} single-job enqueues a side (one commit "
        f"each), {args.history:,} rows of history loaded first into ours and the peer's kept "
        "table. Order within a pair: ours, peer, peer fresh, reversed every other pair.",
        "",
        bl.table(
            ["pair", "ours /s", "peer (history) /s", "peer (fresh) /s", "vs history", "vs fresh"],
            [
                [
                    n,
                    f"{p.ours:,.0f}",
                    f"{p.peer:,.0f}",
                    f"{p.fresh:,.0f}",
                    f"{p.vs_peer:.0%}",
                    f"{p.vs_fresh:.0%}",
                ]
                for n, p in enumerate(pairs, 1)
            ],
        ),
        "",
        ratio_table(summary_rows(pairs), "pairs ours won"),
        "",
        "Medians of each side: "
        + ", ".join(
            f"{name} {statistics.median(v):,.0f}/s"
            for name, v in (
                ("ours", [p.ours for p in pairs]),
                ("peer (history)", [p.peer for p in pairs]),
                ("peer (fresh)", [p.fresh for p in pairs]),
            )
        )
        + ".",
        "",
        "The interval is the sign test's distribution-free 95 % confidence interval of the "
        "median ratio (order statistics of the pairs; no assumption about the noise's shape). "
        f"{GOALS[args.backend]} The conservative reading is the less favourable of the two rows.",
    ]
    return out


def parse_args() -> argparse.Namespace:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--backend", choices=["sqlite", "pg"], default="sqlite")
    parser.add_argument("--keep-dbs", action="store_true", help="keep the PostgreSQL databases")
    return parse_pair_args(
        parser, pairs=15, jobs=2000, history=20_000, history_is="rows loaded into both kept tables"
    )


def parse_pair_args(
    parser: argparse.ArgumentParser, *, pairs: int, jobs: int, history: int, history_is: str
) -> argparse.Namespace:
    """The enqueue benchmarks' shared arguments (``--pairs``, ``--jobs``, ``--history``) added
    with their defaults, the command line parsed, and those three checked."""
    parser.add_argument("--pairs", type=int, default=pairs, help=f"pairs of rounds ({pairs})")
    parser.add_argument("--jobs", type=int, default=jobs, help=f"enqueues per round ({jobs:,})")
    parser.add_argument("--history", type=int, default=history, help=f"{history_is} ({history:,})")
    args = parser.parse_args()
    if args.pairs < 1 or args.jobs < 1 or args.history < 0:
        parser.error("--pairs and --jobs must be at least 1, --history at least 0")
    return args


def main() -> None:
    args = parse_args()
    os.chdir(bl.ROOT)
    facts = bl.machine_facts()
    if args.backend == "pg" and not bl.pg_available():
        raise SystemExit(f"PostgreSQL at {bl.PG_BASE} is not reachable")
    bl.say(f"enqueue pairs: {args.backend}, {args.pairs} pairs of {args.jobs:,}")
    pairs = run(args)
    facts["django-tasks-db"] = tp.peer_version()
    body = report(pairs, args)
    bl.say()
    bl.say("\n".join(body))
    path = bl.write_result(
        f"enqueue-pairs-{args.backend}",
        "Single-job enqueue against django-tasks-db, interleaved pairs",
        body,
        facts,
    )
    bl.say(f"\nwrote {path.relative_to(bl.ROOT)}")


if __name__ == "__main__":
    main()
