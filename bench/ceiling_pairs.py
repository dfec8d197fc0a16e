"""Goal 1 in interleaved pairs: ours at K executors against the batched pgbench ceiling.

throughput.py runs each system three times and divides the medians. On these shared 2-core
machines the same code and the same ceiling have read 51 % and 73 % an hour apart: the ratio
of two medians taken minutes apart mostly measures how fast the host ran at each moment. Here
the rounds take turns, back to back, and each pair's ratio compares rounds made seconds apart:

  ceiling   the batched pgbench script (``pgbench_batched.sql``: our executor's statements and
            rows, batches of 10, without Python), K clients
  warm      K ``run_executor`` processes up and registered before the jobs are released (as in
            production, and as pgbench's clients are)
  cold      K ``run_executor --exit-when-idle`` processes started with the jobs waiting (their
            start-up shares the cores with the first executors' drain)

Every round drains N READY jobs loaded beforehand on its own database, settled first (VACUUM
ANALYZE, CHECKPOINT); the rate is jobs over the span from the first claim to the last
completion, read from the database (throughput.py's span rate). The order within a pair is
reversed every other pair. The result gives each pair's ratios, their median, the sign test's
95 % interval of that median, and the reading against the goal (≥ 60 % at K = 4), for warm and
for cold; the conservative reading is the lower. Beside it, as a diagnostic, the warm ratio by
CPU a job (each side's processes and PostgreSQL's): the drain is CPU-bound, so it says how much
of the rate ratio the work a job explains, and how much is time the host took away. And for
each cold round, how far into its span the last executor made its first claim: the part of the
drain the cold executors' start-up overlapped.

    .venv/bin/python bench/ceiling_pairs.py                 # 15 pairs, N = 10,000, K = 4
    .venv/bin/python bench/ceiling_pairs.py --pairs 3 --jobs 2000
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import benchlib as bl
import enqueue_pairs as ep
import throughput as tp

GOAL = 0.60
SIDES = ("ceiling", "warm", "cold")


@dataclass
class Pair:
    ceiling: float
    warm: float
    cold: float
    # CPU milliseconds a job of the ceiling and the warm side, its processes' and the server's
    # together: a drain that keeps both cores busy runs at about the inverse of it.
    cpu: dict[str, float] = field(default_factory=dict)
    # The cold round's span, and how far into it the last executor made its first claim.
    cold_span_s: float = float("nan")
    cold_joined_s: float = float("nan")

    @property
    def warm_ratio(self) -> float:
        return self.warm / self.ceiling

    @property
    def cold_ratio(self) -> float:
        return self.cold / self.ceiling

    def cpu_ratio(self, side: str) -> float:
        """The ceiling's CPU a job over ``side``'s: the rate ratio a drain bound only by its
        CPU would read."""
        return self.cpu["ceiling"] / self.cpu[side]

    @property
    def cold_late(self) -> float:
        """The share of the cold span that ran before all K executors were claiming."""
        return self.cold_joined_s / self.cold_span_s


def databases() -> dict[str, str]:
    """Ours (warm and cold rounds share it: a table that keeps every earlier round's rows, as
    in throughput.py) and the ceiling's, fresh and migrated (setup)."""
    urls = {}
    for side in ("ours", "ceiling"):
        name = bl.db_name(f"cp_{side}")
        bl.recreate_pg_db(name)
        urls[side] = bl.pg_url(name)
        bl.migrate(urls[side])
    return urls


def measure(urls: dict[str, str], side: str, workers: int, jobs: int, mission: str) -> tp.Round:
    """One round of one side: its span rate (jobs a second), its CPU milliseconds a job (the
    workers' or pgbench's processes and PostgreSQL's, as throughput.py counts them: a cold
    round's include the executors' start-up) and, for ours, when the last executor joined. A
    round that did not finish every job stops the run: its rate would not be a drain's."""
    r = tp.Round(side, "pg", workers, 0, jobs)
    if side == "ceiling":
        # The load and the settling happen inside, outside the measured span.
        tp.drain_pgbench(bl.db_name("cp_ceiling"), r, mission, "pgbench_batched.sql")
    elif side == "warm":
        # It loads the jobs into a paused scope and settles the database itself.
        tp.drain_ours_warm(urls["ours"], r, mission, [])
    else:
        tp.ours_json(urls["ours"], "load", "--n", str(jobs), "--mission", mission)
        tp.counting_commits(
            urls["ours"], r, lambda: tp.drain_ours(urls["ours"], r, mission, [], direct=False)
        )
    if r.done != r.jobs or r.note:
        raise SystemExit(f"{side} round {mission}: {r.done}/{r.jobs} done; {r.note or 'no note'}")
    return r


def run(args: argparse.Namespace) -> list[Pair]:
    urls = databases()
    # One small unmeasured round each: files, caches and the executors' bytecode exist first
    # (at least a batch for each of K pgbench clients, so the ceiling's warm-up runs too).
    step = tp.PGBENCH_BATCH * args.workers
    for side in SIDES:
        measure(urls, side, args.workers, max(400 - 400 % step, step), f"cp-warmup-{side}")
    pairs = []
    for n in range(1, args.pairs + 1):
        order = SIDES if n % 2 else SIDES[::-1]
        got = {
            side: measure(urls, side, args.workers, args.jobs, f"cp-{n}-{side}") for side in order
        }
        cpu = {
            side: got[side].cpu_ms_per_job + got[side].server_cpu_ms_per_job
            for side in ("ceiling", "warm")
        }
        cold = got["cold"]
        pair = Pair(*(got[side].span_rate for side in SIDES), cpu, cold.span_s, cold.joined_s)
        pairs.append(pair)
        bl.say(
            f"  pair {n:2}: ceiling {pair.ceiling:7,.0f}  warm {pair.warm:7,.0f}  cold "
            f"{pair.cold:7,.0f}  ratios {pair.warm_ratio:5.0%} / {pair.cold_ratio:5.0%}  "
            f"warm by CPU {pair.cpu_ratio('warm'):5.0%}  cold all claiming after "
            f"{pair.cold_late:4.0%} of its span"
        )
    if not args.keep_dbs:
        for side in ("ours", "ceiling"):
            bl.drop_pg_db(bl.db_name(f"cp_{side}"))
    return pairs


def summary_rows(pairs: list[Pair]) -> list[list[str]]:
    words = ("met", "not met", "undecided")
    return [
        goal_row("warm / ceiling", [p.warm_ratio for p in pairs], words),
        goal_row("cold / ceiling", [p.cold_ratio for p in pairs], words),
    ]


def goal_row(label: str, ratios: list[float], words: tuple[str, str, str]) -> list[str]:
    """A summary row read against the goal's bar, counting the pairs that reached it."""
    reached = f"{sum(r >= GOAL for r in ratios)} of {len(ratios)}"
    return ep.ratio_row(label, ratios, reached, bar=GOAL, words=words)


def report(pairs: list[Pair], args: argparse.Namespace) -> list[str]:
    return [
        f"PostgreSQL, K = {args.workers}, {args.pairs} pairs of rounds of N = {args.jobs:,} jobs. "
        "Order within a pair: ceiling, warm, cold, reversed every other pair. Rates are span "
        "rates (jobs / (last completion − first claim)).",
        "",
        pair_table(
            pairs,
            ["ceiling /s", "warm /s", "cold /s", "warm / ceiling", "cold / ceiling"],
            lambda p: [
                *(f"{getattr(p, side):,.0f}" for side in SIDES),
                f"{p.warm_ratio:.0%}",
                f"{p.cold_ratio:.0%}",
            ],
        ),
        "",
        ep.ratio_table(summary_rows(pairs), f"pairs at or above {GOAL:.0%}"),
        "",
        "Medians of each side: "
        + ", ".join(
            f"{side} {statistics.median(getattr(p, side) for p in pairs):,.0f}/s" for side in SIDES
        )
        + ".",
        "",
        "The interval is the sign test's distribution-free 95 % confidence interval of the "
        "median ratio (order statistics of the pairs). Goal 1 (issue 15): ours at K = 4 at least "
        "60 % of the batched ceiling. The conservative reading is the lower of the two rows.",
        "",
        "### CPU a job, warm (a diagnostic, not the goal)",
        "",
        "The same rounds' CPU milliseconds a job: the workers' (the warm executors over their "
        "drain, or pgbench's clients) and PostgreSQL's processes together. Both sides keep the "
        "two cores busy, so a side's rate follows the inverse of its CPU a job. Where this ratio "
        "and the rate ratio agree pair by pair, CPU a job explains the rates (the bottleneck is "
        "the work each side does a job); where the rate ratio reads lower, the round lost time "
        "that was neither side's CPU (the host's steal, waits). The cold rounds are left out: "
        "their CPU holds the executors' whole start-up, which their span only partly contains.",
        "",
        pair_table(
            pairs,
            ["ceiling ms", "warm ms", "warm / ceiling by CPU", "the same by rate"],
            lambda p: [
                f"{p.cpu['ceiling']:.3f}",
                f"{p.cpu['warm']:.3f}",
                f"{p.cpu_ratio('warm'):.0%}",
                f"{p.warm_ratio:.0%}",
            ],
        ),
        "",
        ep.ratio_table(
            [
                goal_row(
                    "warm / ceiling, by CPU a job",
                    [p.cpu_ratio("warm") for p in pairs],
                    ("at or above 60 %", "below 60 %", "undecided"),
                )
            ],
            f"pairs at or above {GOAL:.0%}",
        ),
        "",
        "### When the cold executors joined (a diagnostic, not the goal)",
        "",
        "A cold round's span starts at its first claim, as soon as the first executor has "
        "started; the others may still be starting, on the same two cores. Each cold round: "
        "its span, how far into it the last of the K executors made its first claim (read from "
        "the jobs' claims: each executor's earliest), that as a share of the span, and the "
        "cold ratio. Until that moment fewer than K executors drain and the starting ones take "
        "CPU from them.",
        "",
        pair_table(
            pairs,
            ["cold span ms", "last joined at ms", "share of the span", "cold / ceiling"],
            lambda p: [
                f"{p.cold_span_s * 1000:,.0f}",
                f"{p.cold_joined_s * 1000:,.0f}",
                f"{p.cold_late:.0%}",
                f"{p.cold_ratio:.0%}",
            ],
        ),
        "",
        cold_start_summary(pairs),
    ]


def cold_start_summary(pairs: list[Pair]) -> str:
    """The median share of the span run before every cold executor claimed, and the cold
    ratio's median in the pairs whose executors joined earliest against the latest."""
    by_late = sorted(pairs, key=lambda p: p.cold_late)
    half = len(by_late) // 2
    text = (
        "Median share of the cold span before all K executors claimed: "
        f"{statistics.median(p.cold_late for p in pairs):.0%}."
    )
    if half:
        early = statistics.median(p.cold_ratio for p in by_late[:half])
        late = statistics.median(p.cold_ratio for p in by_late[-half:])
        pairs_word = f"{half} pairs" if half > 1 else "pair"
        text += (
            f" The cold ratio's median in the {pairs_word} whose executors joined earliest: "
            f"{early:.1%}; in the {pairs_word} whose executors joined latest: {late:.1%}."
        )
    return text


def pair_table(pairs: list[Pair], headers: list[str], cells: Callable[[Pair], list[str]]) -> str:
    """One row a pair, numbered from 1: its ``cells`` under ``headers``."""
    return bl.table(["pair", *headers], [[n, *cells(p)] for n, p in enumerate(pairs, 1)])


def parse_args() -> argparse.Namespace:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--pairs", type=int, default=15, help="pairs of rounds (15)")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per round (10,000)")
    parser.add_argument("--workers", type=int, default=4, help="K: executors and clients (4)")
    parser.add_argument("--keep-dbs", action="store_true", help="keep the PostgreSQL databases")
    args = parser.parse_args()
    if args.pairs < 1 or args.workers < 1:
        parser.error("--pairs and --workers must be at least 1")
    # pgbench runs N / (10 K) transactions a client: N a multiple of 10 K keeps both sides at N.
    step = tp.PGBENCH_BATCH * args.workers
    if args.jobs < step:
        parser.error(f"--jobs must be at least {step} (a batch of 10 for each of K clients)")
    args.jobs -= args.jobs % step
    return args


def main() -> None:
    args = parse_args()
    os.chdir(bl.ROOT)
    if not bl.pg_available():
        raise SystemExit(f"PostgreSQL at {bl.PG_BASE} is not reachable")
    facts = bl.machine_facts()
    bl.say(f"ceiling pairs: K = {args.workers}, {args.pairs} pairs of {args.jobs:,}")
    pairs = run(args)
    body = report(pairs, args)
    bl.say()
    bl.say("\n".join(body))
    path = bl.write_result(
        "ceiling-pairs", "Goal 1: ours against the batched ceiling, interleaved pairs", body, facts
    )
    bl.say(f"\nwrote {path.relative_to(bl.ROOT)}")


if __name__ == "__main__":
    main()
