"""Enqueue, one by one and batched: ours against django-tasks-db, in interleaved pairs.

throughput.py measures the enqueue between drain rounds; here the sides take turns in short
rounds, back to back, so every ratio compares rounds that saw the same machine:

  ours single     N ``create_job`` calls, one commit each, on a database that keeps every
                  earlier round's jobs and events
  peer single     N ``Task.enqueue()`` calls on django-tasks-db (its own venv), on a table that
                  keeps its earlier rounds' rows
  fresh single    the same on a freshly migrated database each round (setup, not measured)
  ours batched    N jobs through ``create_jobs``, 1,000 a call
  peer batched    N ``Task.enqueue()`` calls in one transaction (the task API has no bulk call)

A pair is one round of each side, in that order or its reverse (alternating). Before the pairs,
both kept databases get ``--history`` rows (bulk-loaded), so "history" means the same on both
sides from the first pair. The result gives each pair's ratios, their median, the sign test's
95 % interval of the median, and how many pairs ours won.

    .venv/bin/python bench/enqueue.py                        # SQLite, 15 pairs of 2,000
    .venv/bin/python bench/enqueue.py --backend pg --pairs 9 --mode single
"""

from __future__ import annotations

import argparse
import os
import statistics

from lib import base as bl
from lib import drains as dr
from lib import pairs as pr

SIDES = {
    "single": ("ours single", "peer single", "fresh single"),
    "batched": ("ours batched", "peer batched"),
}
# Each ratio: (label, ours side, peer side).
RATIOS = (
    ("single: ours / peer (history)", "ours single", "peer single"),
    ("single: ours / peer (fresh)", "ours single", "fresh single"),
    ("batched: ours / peer (history)", "ours batched", "peer batched"),
)


def databases(backend: str) -> dict[str, str]:
    """Ours, the peer's kept table and the peer's fresh one, new and migrated (setup)."""
    urls = {side: bl.fresh_db(backend, bl.db_name(f"ep_{side}")) for side in ("ours", "peer")}
    urls["fresh"] = bl.fresh_db(backend, bl.db_name("ep_fresh"))
    bl.migrate(urls["ours"])
    dr.migrate_peer(urls["peer"])
    return urls


def measure(backend: str, urls: dict[str, str], side: str, jobs: int, mission: str) -> float:
    """One round of one side: enqueues a second, timed inside the process."""
    who, mode = side.split()
    if who == "ours":
        args = ["enqueue", "--n", str(jobs), "--mission", mission, "--mode", mode]
        return float(bl.OWN.side(urls["ours"], *args)["per_s"])
    if who == "fresh":
        urls["fresh"] = bl.fresh_db(backend, bl.db_name("ep_fresh"))
        dr.migrate_peer(urls["fresh"])
    peer_mode = "one-tx" if mode == "batched" else "per-commit"
    out = dr.peer_json(urls[who], "enqueue", "--n", str(jobs), "--mode", peer_mode)
    return float(out["per_s"])


def run(args: argparse.Namespace) -> list[dict[str, float]]:
    dr.ensure_peer_venv()
    urls = databases(args.backend)
    if args.history:
        bl.say(f"history: {args.history:,} rows into ours and the peer's kept table …")
        bl.OWN.side(urls["ours"], "load", "--n", str(args.history), "--mission", "ep-history")
        dr.peer_json(urls["peer"], "load", "--n", str(args.history))
    # One unmeasured round each: the files and caches exist before the first pair.
    measure(args.backend, urls, "ours single", 100, "ep-warmup")
    measure(args.backend, urls, "peer single", 100, "")
    sides = tuple(side for mode in args.modes for side in SIDES[mode])
    pairs = []
    for n in range(1, args.pairs + 1):
        got = {
            side: measure(args.backend, urls, side, args.jobs, f"ep-{n}-{side.split()[1]}")
            for side in pr.order(n, sides)
        }
        pairs.append(got)
        bl.say(f"  pair {n:2}: " + "  ".join(f"{s} {v:7,.0f}" for s, v in got.items()))
    if not args.keep_dbs:
        for url in urls.values():
            bl.drop_db(url)
    return pairs


def report(pairs: list[dict[str, float]], args: argparse.Namespace) -> list[str]:
    sides = [side for mode in args.modes for side in SIDES[mode]]
    ratios = [(label, o, p) for label, o, p in RATIOS if o in pairs[0] and p in pairs[0]]
    rows = [
        [
            n,
            *(f"{pair[s]:,.0f}" for s in sides),
            *(f"{pair[o] / pair[p]:.0%}" for _, o, p in ratios),
        ]
        for n, pair in enumerate(pairs, 1)
    ]
    summary = [pr.ratio_row(label, [q[o] / q[p] for q in pairs]) for label, o, p in ratios]
    medians = ", ".join(f"{s} {statistics.median(q[s] for q in pairs):,.0f}/s" for s in sides)
    db = "PostgreSQL" if args.backend == "pg" else "SQLite"
    return [
        f"{db}, {args.pairs} pairs of {args.jobs:,} enqueues a side, {args.history:,} rows of "
        "history loaded first into ours and the peer's kept table. The order within a pair is "
        "reversed every other pair.",
        "",
        bl.table(["pair", *(f"{s} /s" for s in sides), *(label for label, _, _ in ratios)], rows),
        "",
        pr.ratio_table(summary),
        "",
        f"Medians of each side: {medians}.",
        "",
        f"{pr.INTERVAL_NOTE} Goal: ours single at least equal to the peer's, read on the less "
        "favourable of the two single rows.",
    ]


def parse_args() -> argparse.Namespace:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--backend", choices=["sqlite", "pg"], default="sqlite")
    parser.add_argument("--mode", choices=["single", "batched", "both"], default="both")
    parser.add_argument("--pairs", type=int, default=15, help="pairs of rounds (15)")
    parser.add_argument("--jobs", type=int, default=2000, help="enqueues a round (2,000)")
    parser.add_argument("--history", type=int, default=20_000, help="rows loaded first (20,000)")
    parser.add_argument("--keep-dbs", action="store_true", help="keep the PostgreSQL databases")
    args = parser.parse_args()
    if args.pairs < 1 or args.jobs < 1 or args.history < 0:
        parser.error("--pairs and --jobs must be at least 1, --history at least 0")
    args.modes = ["single", "batched"] if args.mode == "both" else [args.mode]
    return args


def main() -> None:
    args = parse_args()
    os.chdir(bl.ROOT)
    if args.backend == "pg":
        bl.require_pg("enqueue")
    facts = bl.machine_facts()
    bl.say(f"enqueue: {args.backend}, {args.pairs} pairs of {args.jobs:,}, {args.mode}")
    pairs = run(args)
    facts["django-tasks-db"] = dr.peer_version()
    body = report(pairs, args)
    title = "Enqueue against django-tasks-db, interleaved pairs"
    bl.finish(f"enqueue-{args.backend}", title, body, facts, pairs)


if __name__ == "__main__":
    main()
