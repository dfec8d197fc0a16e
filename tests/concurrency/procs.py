"""Start a fleet of worker scripts against a ``proc_db`` database and release them together."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass
class Fleet:
    procs: list[subprocess.Popen]
    stdout: list[Path]
    stderr: list[Path]
    seconds: float = 0.0

    def errors(self) -> list[str]:
        """stderr lines that report a failure ("database is locked", tracebacks, errors)."""
        bad = ("database is locked", "Traceback", "Error", "error")
        return [
            line
            for path in self.stderr
            for line in path.read_text(encoding="utf-8").splitlines()
            if any(word in line for word in bad)
        ]

    def locked(self) -> int:
        return sum(
            path.read_text(encoding="utf-8").count("database is locked") for path in self.stderr
        )

    def returncodes(self) -> list[int]:
        return [proc.returncode for proc in self.procs]


def run_fleet(proc_db, script: str, argv: list[list[str]], workdir: Path, *, timeout: float = 300):
    """Start ``script`` once per argument list, wait until every copy is set up, release them
    at once, and wait for all; ``Fleet.seconds`` is the time from release to the last exit.
    Each copy gets ``--ready``/``--go`` appended."""
    go = workdir / "go"
    procs, outs, errs, ready = [], [], [], []
    for i, args in enumerate(argv):
        ready.append(workdir / f"ready-{i}")
        outs.append(workdir / f"stdout-{i}.txt")
        errs.append(workdir / f"stderr-{i}.txt")
        with open(outs[-1], "w") as out, open(errs[-1], "w") as err:
            procs.append(
                proc_db.script(
                    HERE / script,
                    *args,
                    "--ready",
                    str(ready[-1]),
                    "--go",
                    str(go),
                    stdout=out,
                    stderr=err,
                )
            )
    fleet = Fleet(procs, outs, errs)
    try:
        deadline = time.monotonic() + 120
        while not all(path.exists() for path in ready):
            dead = [p for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise AssertionError(
                    "a worker did not get ready:\n"
                    + "\n".join(path.read_text() for path in errs)[-4000:]
                )
            time.sleep(0.02)
        start = time.monotonic()
        go.touch()
        for proc in procs:
            proc.wait(timeout=timeout)
        fleet.seconds = time.monotonic() - start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return fleet
