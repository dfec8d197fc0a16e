"""SQLite single-job enqueue: the shipped schema against one index variant, in pairs.

Goal 6b's cost is the commit's WAL pages, one or more for each B-tree an enqueue touches. This
measures what one index trade is worth on the path it would change: two copies of one migrated
database with --history earlier jobs, identical but for the variant, and rounds of --jobs
``create_job`` calls (one commit each, ``bench/ourside.py enqueue``, a process a round) taken
in turns, the order reversed every other pair. It reports each pair's ratio (variant / shipped),
the sign test's 95 % interval of the median ratio, and the WAL frames a commit of each (300
enqueues with automatic checkpoints off), in all and by B-tree: which table or index the pages
a commit writes belong to. An A/A control (``--variant same``) shows the harness' own bias.

  full-type-index   the audit type index holding every event, as before audit 0007
  no-time-indexes   without ``job_created_idx`` and ``job_updated_idx`` (the jobs list's
                    default order and its "Updated" sort; not shipped, see ANALYSIS-20261204e)
  same              no change (the control)

    .venv/bin/python bench/sqlite_schema_ab.py --variant full-type-index   # 20 pairs of 600
    .venv/bin/python bench/sqlite_schema_ab.py --variant same --pairs 7 --jobs 200
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
from pathlib import Path
from typing import Any

import benchlib as bl
import enqueue_pairs as ep
import throughput as tp

VARIANTS = {
    "full-type-index": (
        "DROP INDEX audit_type_idx; "
        "CREATE INDEX audit_type_idx ON audit_auditevent (event_type, event_id);"
    ),
    "no-time-indexes": "DROP INDEX job_created_idx; DROP INDEX job_updated_idx;",
    "same": "",
}

# Counts the WAL frames of N enqueues in one process: automatic checkpoints off, the WAL
# emptied first, then its frames read back, each with the B-tree it belongs to (the page number
# in the frame's header, looked up in SQLite's dbstat table while the WAL is still there:
# closing the last connection folds it into the file).
FRAMES = """
import json, struct, sys
sys.path.insert(0, {bench!r})
from ourside import noop_document  # sets the project up as the measured rounds do
from django.db import connection
from inbox.transitions import create_job
connection.ensure_connection()
raw = connection.connection
raw.execute("PRAGMA wal_autocheckpoint=0")
raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
for i in range({n}):
    create_job(noop_document("frames", i), requested_by="bench")
wal = open(connection.settings_dict["NAME"] + "-wal", "rb").read()
size = struct.unpack(">I", wal[8:12])[0]
pages = [struct.unpack(">I", wal[at:at + 4])[0] for at in range(32, len(wal) - size, 24 + size)]
owner = dict(raw.execute("SELECT pageno, name FROM dbstat"))
by_btree = {{}}
for page in pages:
    name = "page 1 (the header)" if page == 1 else owner.get(page, "(free list)")
    by_btree[name] = by_btree.get(name, 0) + 1 / {n}
print(json.dumps({{"total": len(pages) / {n}, "by_btree": by_btree}}))
"""


def prepare(variant: str, history: int) -> dict[str, str]:
    """Two copies of one database with ``history`` jobs; the variant applied to the second."""
    shipped = bl.VAR / "schema_ab_shipped.sqlite3"
    changed = bl.VAR / "schema_ab_variant.sqlite3"
    bl.fresh_sqlite(shipped)
    bl.migrate(bl.sqlite_url(shipped))
    if history:
        tp.ours_json(
            bl.sqlite_url(shipped), "enqueue", "--n", str(history), "--mission", "history",
            "--mode", "per-commit",
        )  # fmt: skip
    _checkpoint(shipped)
    bl.fresh_sqlite(changed)
    shutil.copyfile(shipped, changed)
    con = sqlite3.connect(changed)
    try:
        con.executescript(VARIANTS[variant])
    finally:
        con.close()
    _checkpoint(changed)
    return {"shipped": bl.sqlite_url(shipped), "variant": bl.sqlite_url(changed)}


def _checkpoint(path: Path) -> None:
    """Everything into the main file, the WAL emptied: a copy of the file alone is whole."""
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()


def frames(url: str, n: int = 300) -> dict[str, Any]:
    """WAL frames a commit over ``n`` single-job enqueues, in all and by B-tree, on a copy (the
    pairs' files stay)."""
    source = url.removeprefix("sqlite:///")
    copy = bl.VAR / "schema_ab_frames.sqlite3"
    bl.fresh_sqlite(copy)
    shutil.copyfile(source, copy)
    code = FRAMES.format(n=n, bench=str(bl.BENCH))
    out = bl.run([bl.PY, "-c", code], env=bl.django_env(bl.sqlite_url(copy)))
    return json.loads(out.strip().splitlines()[-1])


def run(
    args: argparse.Namespace,
) -> tuple[list[tuple[float, float]], dict[str, dict[str, Any]]]:
    urls = prepare(args.variant, args.history)
    counted = {side: frames(url) for side, url in urls.items()}
    pairs = []
    for n in range(args.pairs):
        order = ["shipped", "variant"] if n % 2 == 0 else ["variant", "shipped"]
        rates = {}
        for side in order:
            out = tp.ours_json(
                urls[side], "enqueue", "--n", str(args.jobs), "--mission", f"ab{n}",
                "--mode", "per-commit",
            )  # fmt: skip
            rates[side] = float(out["per_s"])
        pairs.append((rates["shipped"], rates["variant"]))
        bl.say(
            f"  pair {n + 1:2}: shipped {rates['shipped']:7,.0f}  variant "
            f"{rates['variant']:7,.0f}  ratio {rates['variant'] / rates['shipped']:6.1%}"
        )
    return pairs, counted


def report(
    pairs: list[tuple[float, float]],
    counted: dict[str, dict[str, Any]],
    args: argparse.Namespace,
) -> list[str]:
    ratios = [variant / shipped for shipped, variant in pairs]
    faster = f"{sum(r > 1 for r in ratios)} of {len(ratios)}"
    words = ("variant at least as fast", "variant slower", "level")
    return [
        f"SQLite, variant `{args.variant}`, {args.pairs} pairs of {args.jobs:,} single-job "
        f"enqueues a side (one commit each, a process a round), {args.history:,} jobs of "
        "history in both copies. Order within a pair: shipped, variant, reversed every other "
        "pair.",
        "",
        f"Applied to the variant's copy: `{VARIANTS[args.variant] or '(nothing)'}`",
        "",
        bl.table(
            ["pair", "shipped /s", "variant /s", "variant / shipped"],
            [[n, f"{s:,.0f}", f"{v:,.0f}", f"{v / s:.1%}"] for n, (s, v) in enumerate(pairs, 1)],
        ),
        "",
        ep.ratio_table(
            [ep.ratio_row("variant / shipped", ratios, faster, words=words)],
            "pairs the variant was faster",
        ),
        "",
        f"Medians: shipped {statistics.median(s for s, _v in pairs):,.0f}/s, variant "
        f"{statistics.median(v for _s, v in pairs):,.0f}/s. WAL frames a commit (300 "
        f"enqueues): shipped {counted['shipped']['total']:.1f}, variant "
        f"{counted['variant']['total']:.1f}.",
        "",
        "WAL frames a commit by B-tree (a table or an index; page 1, which also holds the "
        "schema's root, is written when the file grows):",
        "",
        frames_table(counted),
    ]


def frames_table(counted: dict[str, dict[str, Any]]) -> str:
    """Each B-tree's frames a commit in the two copies, the most written first."""
    shipped, variant = counted["shipped"]["by_btree"], counted["variant"]["by_btree"]
    names = sorted({*shipped, *variant}, key=lambda n: (-shipped.get(n, 0), n))
    rows = [[n, f"{shipped.get(n, 0):.2f}", f"{variant.get(n, 0):.2f}"] for n in names]
    totals = [sum(shipped.values()), sum(variant.values())]
    rows.append(["all", *(f"{t:.2f}" for t in totals)])
    return bl.table(["B-tree", "shipped", "variant"], rows)


def parse_args() -> argparse.Namespace:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="full-type-index")
    return ep.parse_pair_args(parser, pairs=20, jobs=600, history=3000, history_is="earlier jobs")


def main() -> None:
    args = parse_args()
    bl.say(f"SQLite schema A/B: {args.variant}, {args.pairs} pairs of {args.jobs:,}")
    pairs, counted = run(args)
    body = report(pairs, counted, args)
    bl.say("\n".join(body))
    facts = {**bl.machine_facts(), "variant": args.variant}
    path = bl.write_result(
        f"sqlite-schema-ab-{args.variant}", "SQLite schema A/B: single-job enqueue", body, facts
    )
    bl.say(f"\nwrote {path.relative_to(bl.ROOT)}")


if __name__ == "__main__":
    main()
