"""How fast an interpreter runs the kinds of operations an executor's turn is made of.

The executor's CPU a job is its Python (``ANALYSIS-20261205c.md``, ``ANALYSIS-20261205d.md``),
so the interpreter's build decides part of goal 1 on a host: pyenv, for one, builds CPython
without profile-guided and link-time optimization (``--enable-optimizations --with-lto``)
unless ``PYTHON_CONFIGURE_OPTS`` asks for them. This runs one fixed workload, in a child process
per interpreter, and prints each one's best CPU time of seven and its ratio to the first. The
workload is not the project's code (an interpreter of another minor version cannot import
Django 6): per row, a JSON text parsed, a canonical JSON written and hashed with sha256, a
dataclass with a dict built, a tuple kept.

    .venv/bin/python bench/interpreter.py /usr/bin/python3.11 ~/.pyenv/versions/3.11.7/bin/python3
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import time
from typing import Any

ROWS = 20_000
REPEATS = 7
# Seven passes take a few seconds even on a slow build; a child that runs this long is stuck.
CHILD_TIMEOUT = 300.0


@dataclasses.dataclass
class _Outcome:
    job: dict[str, Any]
    to: str
    code: str
    error: str = ""
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)


def workload(rows: int) -> int:
    """One pass over ``rows`` job-like rows; returns how many it kept (so nothing is skipped)."""
    source = [
        {
            "job_id": f"m-{i:07d}",
            "state": "READY",
            "payload": json.dumps({"a": i, "b": "x" * 20, "c": [1, 2, 3]}),
            "n": i,
        }
        for i in range(rows)
    ]
    kept = []
    for row in source:
        payload = json.loads(row["payload"])
        canonical = "{" + ",".join(f'"{k}":{json.dumps(v)}' for k, v in sorted(payload.items()))
        seal = hashlib.sha256((canonical + "}").encode()).hexdigest()
        outcome = _Outcome(row, "SUCCEEDED", "OK", detail={"seal": seal, "ms": 0.1 * row["n"]})
        kept.append((outcome.job["job_id"], outcome.detail["seal"][:8], len(outcome.to)))
    return len(kept)


def best_cpu_ms() -> float:
    """The best of ``REPEATS`` passes, in CPU milliseconds of this process."""
    best = float("inf")
    for _ in range(REPEATS):
        started = time.process_time()
        if workload(ROWS) != ROWS:
            raise SystemExit("the workload lost rows")
        best = min(best, time.process_time() - started)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("interpreters", nargs="*", help="python executables (default: this one)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(sys.version.split()[0], f"{best_cpu_ms():.1f}")
        return
    first = None
    for python in args.interpreters or [sys.executable]:
        try:
            version, ms = _measure(python)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            raise SystemExit(f"{python}: could not run the workload ({exc})") from None
        first = first or ms
        print(f"{python} (Python {version}): {ms:,.0f} ms, {ms / first:.2f} of the first")


def _measure(python: str) -> tuple[str, float]:
    """(version, best CPU ms) of ``python``, read from one child process."""
    done = subprocess.run(
        [python, __file__, "--child"],
        capture_output=True,
        text=True,
        check=True,
        timeout=CHILD_TIMEOUT,
    )
    version, ms = done.stdout.split()
    return version, float(ms)


if __name__ == "__main__":
    main()
