"""A real PgBouncer in transaction-pooling mode, started by the tests on a free loopback port.

Debian's ``pgbouncer`` package (CI installs it with apt) runs with a config in a temporary
folder; the machine's PostgreSQL settings are never touched. ``bouncer_db`` is a ``proc_db``
(a fresh migrated PostgreSQL database) whose URL goes through PgBouncer and whose processes run
with ``DATABASE_POOLER=pgbouncer`` (no session state: per-transaction timeouts, no server-side
prepared statements or cursors).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support.procdb import ProcDB

CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
auth_type = trust
auth_file = {auth}
pool_mode = transaction
max_client_conn = 400
default_pool_size = 20
server_reset_query =
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
logfile = {log}
pidfile = {pid}
unix_socket_dir =
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Bouncer:
    """One PgBouncer in front of the suite's PostgreSQL, on a fixed free port: ``stop`` and
    ``start`` again to play a pooler restart (its clients' sessions end, the port refuses
    connections until it is back)."""

    def __init__(self) -> None:
        self.binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.path.exists(self.binary):
            pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
        suite = urlsplit(os.environ["DATABASE_URL"])
        # PgBouncer refuses to run as root, so it runs as postgres: its folder must be
        # reachable by that user (pytest's own temp root is private to us).
        self.folder = Path(tempfile.mkdtemp(prefix="console-pgbouncer-"))
        os.chmod(self.folder, 0o777)
        self.port = _free_port()
        auth = self.folder / "users.txt"
        auth.write_text(f'"{suite.username or "postgres"}" ""\n')
        self.config = self.folder / "pgbouncer.ini"
        self.config.write_text(
            CONFIG.format(
                host=suite.hostname or "127.0.0.1",
                port=suite.port or 5432,
                listen=self.port,
                auth=auth,
                log=self.folder / "pgbouncer.log",
                pid=self.folder / "pgbouncer.pid",
            )
        )
        for path in (auth, self.config):
            os.chmod(path, 0o644)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        command = [self.binary, str(self.config)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "postgres"]
        # Its console output goes to a file, never to a pipe nobody reads: a full pipe (64 KiB
        # of log lines) blocks PgBouncer in write() and every client then times out connecting.
        console = (self.folder / "pgbouncer.out").open("a")
        self.proc = subprocess.Popen(command, stdout=console, stderr=subprocess.STDOUT)
        console.close()
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = self.folder / "pgbouncer.log"
                    text = log.read_text() if log.exists() else ""
                    out = (self.folder / "pgbouncer.out").read_text()
                    raise RuntimeError(f"pgbouncer did not start: {out} {text}") from exc
                time.sleep(0.1)

    def stop(self) -> None:
        """Kill it (no graceful drain: frozen test clients may still hold connections)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None
        (self.folder / "pgbouncer.pid").unlink(missing_ok=True)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def url_for(self, db: ProcDB) -> ProcDB:
        """``db``, reached through this PgBouncer, its processes told so."""
        return through_pooler(db, self.port)


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[int]:
    """Start PgBouncer in front of the suite's PostgreSQL; its port."""
    bouncer = Bouncer()
    bouncer.start()
    yield bouncer.port
    bouncer.close()


@pytest.fixture
def own_bouncer() -> Iterator[Bouncer]:
    """A PgBouncer of this test's own, started, which the test may stop and start again."""
    bouncer = Bouncer()
    bouncer.start()
    yield bouncer
    bouncer.close()


@pytest.fixture
def bouncer_db(proc_db: ProcDB, pgbouncer: int) -> ProcDB:
    """``proc_db``, reached through PgBouncer in transaction-pooling mode."""
    return through_pooler(proc_db, pgbouncer)


def through_pooler(db: ProcDB, port: int, *, setting: str = "pgbouncer") -> ProcDB:
    """``db`` reached through the PgBouncer on ``port``; its processes get
    ``DATABASE_POOLER=setting`` (empty: the misconfiguration the pooler check catches)."""
    parts = urlsplit(db.url)
    netloc = f"{parts.username or 'postgres'}@127.0.0.1:{port}"
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return ProcDB(url, "postgresql", Path(db.workdir), {"DATABASE_POOLER": setting})
