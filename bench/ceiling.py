"""How close ours comes to the pgbench ceiling at K executors, measured in interleaved pairs.

throughput.py divides medians of rounds taken minutes apart; on a shared machine those medians
mostly measure how fast the host ran at each moment. Here the rounds take turns, back to back,
and each pair's ratio compares rounds made seconds apart (PostgreSQL only):

  ceiling   the batched pgbench script (``lib/pgbench_batched.sql``: our executor's statements
            and audit rows, batches of 10, without Python), K clients
  warm      K ``run_executor`` processes up and registered before the jobs are released (as in
            production, and as pgbench's clients are)
  cold      K ``run_executor --exit-when-idle`` processes started with the jobs waiting (their
            start-up shares the cores with the first executors' drain)

Every round drains N READY jobs on its own settled database; the rate is the span rate, as in
throughput.py. The order within a pair is reversed every other pair. The result gives each
pair's ratios, their median, the sign test's 95 % interval of that median, and the reading
against the goal (ours at least 60 % of the ceiling at K = 4), warm and cold; the conservative
reading is the lower. Beside it, the warm ratio by CPU a job (each side's processes and
PostgreSQL's): where it agrees with the rate ratio, the work a job explains the rates.

    .venv/bin/python bench/ceiling.py                       # 15 pairs, N = 10,000, K = 4
    .venv/bin/python bench/ceiling.py --pairs 3 --jobs 2000
"""

from __future__ import annotations

import argparse
import os
import statistics

from lib import base as bl
from lib import drains as dr
from lib import pairs as pr

GOAL = 0.60
SIDES = ("ceiling", "warm", "cold")


def measure(urls: dict[str, str], side: str, workers: int, jobs: int, mission: str) -> dr.Round:
    """One round of one side. A round that did not finish every job stops the run: its rate
    would not be a drain's."""
    r = dr.Round(side, "pg", workers, 0, jobs)
    if side == "ceiling":
        dr.drain_pgbench(bl.db_name("cp_ceiling"), r, mission)
    elif side == "warm":
        dr.drain_warm(bl.OWN, urls["ours"], r, mission)
    else:
        bl.OWN.side(urls["ours"], "load", "--n", str(jobs), "--mission", mission)
        dr.settled(urls["ours"], r, lambda: dr.drain_cold(bl.OWN, urls["ours"], r, mission))
    if r.note:
        raise SystemExit(f"{side} round {mission}: {r.note}")
    return r


def run(args: argparse.Namespace) -> list[dict[str, dr.Round]]:
    # Ours (warm and cold share it: a table that keeps every earlier round's rows) and the
    # ceiling's, each new and migrated.
    urls = {side: bl.fresh_db("pg", bl.db_name(f"cp_{side}")) for side in ("ours", "ceiling")}
    for url in urls.values():
        bl.migrate(url)
    # One small unmeasured round each (a batch for each of K pgbench clients at least).
    step = dr.PGBENCH_BATCH * args.workers
    for side in SIDES:
        measure(urls, side, args.workers, max(400 - 400 % step, step), f"cp-warmup-{side}")
    done = []
    for n in range(1, args.pairs + 1):
        got = {
            side: measure(urls, side, args.workers, args.jobs, f"cp-{n}-{side}")
            for side in pr.order(n, SIDES)
        }
        done.append(got)
        c, w, k = (got[s].span_rate for s in SIDES)
        bl.say(
            f"  pair {n:2}: ceiling {c:7,.0f}  warm {w:7,.0f}  cold {k:7,.0f}  ratios "
            f"{w / c:5.0%} / {k / c:5.0%}  warm by CPU {cpu_ratio(got):5.0%}"
        )
    if not args.keep_dbs:
        for url in urls.values():
            bl.drop_db(url)
    return done


def cpu_ms(r: dr.Round) -> float:
    """CPU milliseconds a job, the side's processes and PostgreSQL's together: a drain that
    keeps both cores busy runs at about its inverse."""
    return r.cpu_ms_per_job + r.server_cpu_ms_per_job


def cpu_ratio(pair: dict[str, dr.Round]) -> float:
    """The ceiling's CPU a job over the warm side's: the ratio a CPU-bound drain would read."""
    return cpu_ms(pair["ceiling"]) / cpu_ms(pair["warm"])


def report(done: list[dict[str, dr.Round]], args: argparse.Namespace) -> list[str]:
    def ratios(side: str) -> list[float]:
        return [p[side].span_rate / p["ceiling"].span_rate for p in done]

    rows = [
        [
            n,
            *(f"{p[s].span_rate:,.0f}" for s in SIDES),
            f"{w:.0%}",
            f"{c:.0%}",
            f"{cpu_ms(p['ceiling']):.3f}",
            f"{cpu_ms(p['warm']):.3f}",
            f"{cpu_ratio(p):.0%}",
        ]
        for n, (p, w, c) in enumerate(zip(done, ratios("warm"), ratios("cold"), strict=True), 1)
    ]
    headers = ["pair", "ceiling /s", "warm /s", "cold /s", "warm / ceiling", "cold / ceiling"]
    headers += ["ceiling CPU ms/job", "warm CPU ms/job", "warm / ceiling by CPU"]
    summary = [
        pr.ratio_row(label, values, bar=GOAL, words=pr.GOAL_WORDS)
        for label, values in (
            ("warm / ceiling", ratios("warm")),
            ("cold / ceiling", ratios("cold")),
            ("warm / ceiling, by CPU a job", [cpu_ratio(p) for p in done]),
        )
    ]
    medians = ", ".join(
        f"{side} {statistics.median(p[side].span_rate for p in done):,.0f}/s" for side in SIDES
    )
    return [
        f"PostgreSQL, K = {args.workers}, {args.pairs} pairs of rounds of N = {args.jobs:,} jobs. "
        "Order within a pair: ceiling, warm, cold, reversed every other pair. Rates are span "
        "rates (jobs / (last completion − first claim)).",
        "",
        bl.table(headers, rows),
        "",
        pr.ratio_table(summary, GOAL),
        "",
        f"Medians of each side: {medians}.",
        "",
        f"{pr.INTERVAL_NOTE} Goal: ours at K = 4 at least 60 % of the batched ceiling; the "
        "conservative reading is the lower of the first two rows. CPU a job counts the warm "
        "executors over their drain or pgbench's clients, and PostgreSQL's processes; where "
        "the rate ratio reads lower than the CPU ratio, the round lost time that was neither "
        "side's CPU (the host's steal, waits).",
    ]


def parse_args() -> argparse.Namespace:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--pairs", type=int, default=15, help="pairs of rounds (15)")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs a round (10,000)")
    parser.add_argument("--workers", type=int, default=4, help="K: executors and clients (4)")
    parser.add_argument("--keep-dbs", action="store_true", help="keep the PostgreSQL databases")
    args = parser.parse_args()
    if args.pairs < 1 or args.workers < 1:
        parser.error("--pairs and --workers must be at least 1")
    # pgbench runs N / (10 K) transactions a client: N a multiple of 10 K keeps both sides at N.
    step = dr.PGBENCH_BATCH * args.workers
    if args.jobs < step:
        parser.error(f"--jobs must be at least {step} (a batch of 10 for each of K clients)")
    args.jobs -= args.jobs % step
    return args


def main() -> None:
    args = parse_args()
    os.chdir(bl.ROOT)
    bl.require_pg("ceiling")
    facts = bl.machine_facts()
    bl.say(f"ceiling: K = {args.workers}, {args.pairs} pairs of {args.jobs:,}")
    done = run(args)
    raw = [{side: vars(r) for side, r in p.items()} for p in done]
    body = report(done, args)
    bl.finish("ceiling", "Ours against the batched ceiling, interleaved pairs", body, facts, raw)


if __name__ == "__main__":
    main()
