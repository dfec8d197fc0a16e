"""Drain throughput and enqueue rate: ours against django-tasks-db and the pgbench ceiling, or
one source tree against another, side by side in one run.

With one tree (this checkout by default), per database, repeat and K (executors, clients):
  ours             K ``run_executor --scope noop --exit-when-idle`` started with the jobs waiting
  ours warm        the same K started first, the jobs released once all have registered
  ours-tasks       no-op tasks through ``django.tasks`` on our backend, K cold executors
  django-tasks-db  the same no-op task on the peer, K ``db_worker --batch`` (its own venv)
  ceiling          pgbench, K clients, ``lib/pgbench_batched.sql`` (PostgreSQL only)
With two or more trees (``--tree NAME=PATH`` each), per database, repeat and K: each tree's cold
and warm rounds, each tree with its own interpreter (its ``.venv``) and its own databases; the
report gives each tree's medians and the ratio of each to the first tree.

The rounds take turns (the order reversed every other repeat), so every system sees the same
machine. Each cold round's N jobs come from the measured enqueue: half one by one (``create_job``,
one commit each; the peer: ``Task.enqueue()``), half batched (``create_jobs``, 1,000 a call; the
task APIs, which have no bulk call: one transaction). A round's rate is N / (last completion −
first claim), read from the database; a PostgreSQL database settles (VACUUM ANALYZE, CHECKPOINT)
before every round. Each system's first round is an unmeasured warm-up.

    .venv/bin/python bench/throughput.py                      # N=20,000, 3 repeats, all systems
    .venv/bin/python bench/throughput.py --tree before=/path/to/main --tree after=. --repeat 3
    .venv/bin/python bench/throughput.py --jobs 400 --repeat 1  # what `make bench` runs
"""

from __future__ import annotations

import argparse
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from lib import base as bl
from lib import drains as dr

BACKENDS = {"pg": "PostgreSQL", "sqlite": "SQLite"}


@dataclass
class Enqueue:
    system: str
    backend: str
    mode: str  # single | batched
    per_s: float


@dataclass(frozen=True)
class System:
    label: str
    kind: str  # cold | warm | tasks | peer | ceiling
    tree: bl.Tree | None = None

    @property
    def db(self) -> str:
        """Each system drains its own database; a tree's cold and warm rounds share one."""
        if self.kind in ("cold", "warm"):
            return f"tp_{self.tree.name}"
        if self.kind == "tasks":
            return f"tp_{self.tree.name}_tasks"
        return f"tp_{self.kind}"


def systems(args: argparse.Namespace, backend: str) -> list[System]:
    trees = args.trees
    if len(trees) > 1:
        out = [System(t.name, "cold", t) for t in trees]
        return out + ([] if args.no_warm else [System(f"{t.name} warm", "warm", t) for t in trees])
    t = trees[0]
    out = [System(t.name, "cold", t)]
    if not args.no_warm:
        out.append(System(f"{t.name} warm", "warm", t))
    if not args.no_tasks:
        out.append(System(f"{t.name}-tasks", "tasks", t))
    if not args.no_peer:
        out.append(System("django-tasks-db", "peer"))
    if backend == "pg" and not args.no_ceiling:
        out.append(System("ceiling", "ceiling"))
    return out


def setup(system: System, backend: str, first: bl.Tree) -> str:
    """The system's database, new and migrated (the ceiling's with the first tree's schema)."""
    url = bl.fresh_db(backend, bl.db_name(system.db))
    if system.kind == "peer":
        dr.migrate_peer(url)
    else:
        (system.tree or first).migrate(url)
    return url


def enqueue(system: System, url: str, backend: str, n: int, mission: str) -> list[Enqueue]:
    """The round's N jobs through the measured paths: half one by one, half batched."""
    half = n // 2
    out = []
    for mode, count, offset in (("single", half, 0), ("batched", n - half, half)):
        if system.kind == "cold":
            args = ["enqueue", "--n", str(count), "--mission", mission, "--mode", mode]
            e = system.tree.side(url, *args, "--offset", str(offset))
        elif system.kind == "tasks":
            e = system.tree.side(url, "tasks-enqueue", "--n", str(count), "--mode", mode)
        else:
            peer_mode = "one-tx" if mode == "batched" else "per-commit"
            e = dr.peer_json(url, "enqueue", "--n", str(count), "--mode", peer_mode)
        out.append(Enqueue(system.label, backend, mode, e["per_s"]))
    return out


def play(system: System, url: str, r: dr.Round, args: argparse.Namespace) -> list[Enqueue]:
    """One round of one system; the enqueue figures it measured on the way."""
    mission = f"tp-{r.backend}-r{r.repeat}-k{r.workers}"
    extra = args.executor_args.split()
    if system.kind == "warm":
        dr.drain_warm(system.tree, url, r, f"{mission}-warm", extra)
        return []
    if system.kind == "ceiling":
        dr.drain_pgbench(url.rsplit("/", 1)[-1], r, mission)
        return []
    measured = enqueue(system, url, r.backend, r.jobs, mission)
    if system.kind == "peer":
        dr.settled(url, r, lambda: dr.drain_peer(url, r))
    else:
        tasks = system.kind == "tasks"
        dr.settled(url, r, lambda: dr.drain_cold(system.tree, url, r, mission, extra, tasks))
    return measured


def run(args: argparse.Namespace) -> tuple[list[dr.Round], list[Enqueue]]:
    rounds: list[dr.Round] = []
    enqueues: list[Enqueue] = []
    for backend in args.backends:
        competitors = systems(args, backend)
        urls = {s: setup(s, backend, args.trees[0]) for s in competitors}
        for s in competitors:  # the unmeasured warm-up: caches, files, connections
            play(s, urls[s], dr.Round(s.label, backend, 1, 0, args.step), args)
        for rep in range(1, args.repeat + 1):
            for k in args.workers[backend]:
                for s in competitors if rep % 2 else competitors[::-1]:
                    r = dr.Round(s.label, backend, k, rep, args.jobs)
                    enqueues += play(s, urls[s], r, args)
                    rounds.append(r)
                    dr.show(r)
        if not args.keep_dbs:
            for url in urls.values():
                bl.drop_db(url)
    return rounds, enqueues


# --- report -----------------------------------------------------------------------------------


def repeats(args: argparse.Namespace) -> str:
    return f"{args.repeat} repeat{'s' if args.repeat > 1 else ''}"


def _ms(value: float) -> str:
    return "n/a" if value != value else f"{value:.2f}"


class Figures:
    """The medians a report quotes: drain rate by (backend, system, K), enqueue rate by
    (backend, system, mode), each with its list of single figures."""

    def __init__(self, rounds: list[dr.Round], enqueues: list[Enqueue]) -> None:
        self.rounds: dict[tuple[str, str, int], list[dr.Round]] = defaultdict(list)
        for r in rounds:
            self.rounds[(r.backend, r.system, r.workers)].append(r)
        self.enq: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for e in enqueues:
            self.enq[(e.backend, e.system, e.mode)].append(e.per_s)

    def drain(self, backend: str, system: str, k: int) -> float:
        return bl.median(r.span_rate for r in self.rounds.get((backend, system, k), []))

    def drains(self, backend: str, system: str, k: int) -> str:
        return " / ".join(f"{r.span_rate:,.0f}" for r in self.rounds.get((backend, system, k), []))

    def enqueue(self, backend: str, system: str, mode: str) -> float:
        return bl.median(self.enq.get((backend, system, mode), []))

    def enqueues(self, backend: str, system: str, mode: str) -> str:
        return " / ".join(f"{x:,.0f}" for x in self.enq.get((backend, system, mode), []))

    def drain_table(self) -> str:
        rows = []
        for (backend, system, k), rs in sorted(self.rounds.items()):
            rows.append(
                (
                    BACKENDS[backend],
                    system,
                    k,
                    round(self.drain(backend, system, k)),
                    self.drains(backend, system, k),
                    _ms(bl.median(r.commits_per_job for r in rs)),
                    _ms(bl.median(r.cpu_ms_per_job for r in rs)),
                    _ms(bl.median(r.server_cpu_ms_per_job for r in rs)),
                    "; ".join(sorted({r.note for r in rs if r.note})),
                )
            )
        headers = ["db", "system", "K", "median jobs/s", "each repeat", "commits/job"]
        headers += ["worker CPU ms/job", "server CPU ms/job", "notes"]
        return bl.table(headers, rows)


def compare_report(f: Figures, args: argparse.Namespace) -> list[str]:
    """Two or more trees: each measure's median per tree and its ratio to the first tree's."""
    names = [t.name for t in args.trees]
    base, others = names[0], names[1:]
    rows = []

    def row(label: str, get: Any, each: Any) -> None:
        values = [get(n) for n in names]
        ratios = [bl.pct(bl.ratio(v, values[0])) for v in values[1:]]
        rows.append([label, *(f"{v:,.0f}" for v in values), *ratios, *(each(n) for n in names)])

    for backend in args.backends:
        db = BACKENDS[backend]
        for k in args.workers[backend]:
            for warm in ("", " warm") if not args.no_warm else ("",):
                row(
                    f"{db} K={k} drain{' (warm)' if warm else ''}",
                    lambda n, b=backend, k=k, w=warm: f.drain(b, n + w, k),
                    lambda n, b=backend, k=k, w=warm: f.drains(b, n + w, k),
                )
        for mode in ("single", "batched"):
            row(
                f"{db} enqueue {mode}",
                lambda n, b=backend, m=mode: f.enqueue(b, n, m),
                lambda n, b=backend, m=mode: f.enqueues(b, n, m),
            )
    headers = ["measure (jobs/s)", *names, *(f"{o} / {base}" for o in others)]
    headers += [f"{n}: each round" for n in names]
    return [
        f"{len(names)} trees side by side: "
        + "; ".join(f"{t.name} = {t.root} ({bl.git_commit(t.root)})" for t in args.trees)
        + f". N = {args.jobs:,} jobs a round, {repeats(args)}; figures are medians; "
        "enqueue: N/2 jobs one by one and N/2 in batches of 1,000 before every cold round.",
        "",
        bl.table(headers, rows),
        "",
        "## Every drain round",
        "",
        f.drain_table(),
    ]


def single_report(f: Figures, args: argparse.Namespace) -> list[str]:
    """One tree against the peer and the ceiling."""
    ours = args.trees[0].name
    ratios = []
    for backend in args.backends:
        for k in args.workers[backend]:
            cold, warm = f.drain(backend, ours, k), f.drain(backend, f"{ours} warm", k)
            peer, ceiling = f.drain(backend, "django-tasks-db", k), f.drain(backend, "ceiling", k)
            tasks = f.drain(backend, f"{ours}-tasks", k)
            ratios.append(
                (
                    BACKENDS[backend],
                    k,
                    bl.times(bl.ratio(cold, peer)),
                    bl.times(bl.ratio(tasks, peer)),
                    bl.pct(bl.ratio(cold, ceiling)),
                    bl.pct(bl.ratio(warm, ceiling)),
                )
            )
    enq = []
    for (backend, system, mode), values in sorted(f.enq.items()):
        peer = f.enqueue(backend, "django-tasks-db", mode)
        mine = bl.median(values)
        vs = bl.pct(bl.ratio(mine, peer)) if system != "django-tasks-db" else ""
        enq.append(
            (BACKENDS[backend], system, mode, round(mine), f.enqueues(backend, system, mode), vs)
        )
    return [
        f"N = {args.jobs:,} jobs a round, {repeats(args)}; figures are medians. Drain "
        "rate = jobs / (last completion − first claim), read from the database.",
        "",
        "## Drain rate (jobs/s)",
        "",
        f.drain_table(),
        "",
        "## Ratios",
        "",
        bl.table(
            [
                "db",
                "K",
                f"{ours} / peer",
                f"{ours}-tasks / peer",
                "cold / ceiling",
                "warm / ceiling",
            ],
            ratios,
        ),
        "",
        f"`{ours}-tasks / peer` is the exact task-backend comparison: `noop.enqueue()` through "
        "`django.tasks` on both sides, the same no-op task, the same database settings. The "
        "ceiling is our executor's statements and audit rows in pure SQL (pgbench, batches of "
        "10); goal on PostgreSQL at K = 4: ours at least 60 % of it.",
        "",
        "## Enqueue (jobs/s)",
        "",
        bl.table(["db", "system", "mode", "median", "each round", "vs the peer"], enq),
        "",
        "Batched: ours `create_jobs` in calls of 1,000; the task APIs (ours-tasks, the peer) one "
        "transaction for the round's half, their API having no bulk call.",
    ]


def parse_args() -> argparse.Namespace:
    parser = bl.arg_parser(__doc__)
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a source tree to measure (repeat for a side-by-side run; default: this checkout)",
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs a round (20,000)")
    parser.add_argument("--repeat", "--repeats", type=int, default=3, help="repeats (3)")
    parser.add_argument("--backends", default="pg,sqlite", help="pg,sqlite (both)")
    parser.add_argument("--pg-workers", default="1,4", help="K values on PostgreSQL (1,4)")
    parser.add_argument("--sqlite-workers", default="1", help="K values on SQLite (1)")
    parser.add_argument("--executor-args", default="", help="extra run_executor flags (none)")
    parser.add_argument("--no-warm", action="store_true", help="skip the warm rounds")
    parser.add_argument("--no-tasks", action="store_true", help="skip ours through django.tasks")
    parser.add_argument("--no-peer", action="store_true", help="skip django-tasks-db")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the pgbench ceiling")
    parser.add_argument("--keep-dbs", action="store_true", help="keep the PostgreSQL databases")
    args = parser.parse_args()
    args.trees = [bl.Tree.parse(spec) for spec in args.tree] or [bl.OWN]
    if len({t.name for t in args.trees}) != len(args.trees):
        parser.error("--tree names must differ")
    args.backends = [b for b in args.backends.split(",") if b]
    if not args.backends or set(args.backends) - set(BACKENDS):
        parser.error("--backends takes pg, sqlite or both")
    try:
        args.workers = {
            "pg": [int(k) for k in args.pg_workers.split(",")],
            "sqlite": [int(k) for k in args.sqlite_workers.split(",")],
        }
    except ValueError:
        parser.error("--pg-workers and --sqlite-workers take numbers, comma-separated")
    ks = [k for b in args.backends for k in args.workers[b]]
    if min(ks) < 1 or args.repeat < 1:
        parser.error("K values and --repeat must be at least 1")
    # A multiple of 10 K for every K: each pgbench client runs whole batches of 10.
    args.step = math.lcm(*(dr.PGBENCH_BATCH * k for k in ks))
    args.jobs = max(args.step, args.jobs - args.jobs % args.step)
    return args


def main() -> None:
    args = parse_args()
    os.chdir(bl.ROOT)
    if "pg" in args.backends:
        bl.require_pg("throughput")
    single = len(args.trees) == 1
    if not single or args.no_peer:
        args.no_peer = True
    else:
        dr.ensure_peer_venv()
    facts = bl.machine_facts(args.trees)
    if not args.no_peer:
        facts["django-tasks-db"] = dr.peer_version()
    facts["executor flags"] = args.executor_args or "(defaults)"
    pythons = {v.split()[0] for k, v in facts.items() if k.endswith("Python / Django")}
    if len(pythons) > 1:
        bl.say(f"note: the trees run different Python versions ({', '.join(sorted(pythons))})")
    bl.say(
        f"throughput: N={args.jobs:,}, {args.repeat} repeats, trees {[t.name for t in args.trees]}"
    )
    rounds, enqueues = run(args)
    f = Figures(rounds, enqueues)
    body = single_report(f, args) if single else compare_report(f, args)
    raw = {"rounds": [vars(r) for r in rounds], "enqueues": [vars(e) for e in enqueues]}
    title = "Throughput" if single else "Throughput, trees side by side"
    bl.finish("throughput", title, body, facts, raw)


if __name__ == "__main__":
    main()
