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


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[int]:
    """Start PgBouncer in front of the suite's PostgreSQL; its port."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    suite = urlsplit(os.environ["DATABASE_URL"])
    # PgBouncer refuses to run as root, so it runs as postgres: its folder must be reachable
    # by that user (pytest's own temp root is private to us).
    folder = Path(tempfile.mkdtemp(prefix="console-pgbouncer-"))
    os.chmod(folder, 0o777)
    listen = _free_port()
    auth = folder / "users.txt"
    auth.write_text(f'"{suite.username or "postgres"}" ""\n')
    config = folder / "pgbouncer.ini"
    config.write_text(
        CONFIG.format(
            host=suite.hostname or "127.0.0.1",
            port=suite.port or 5432,
            listen=listen,
            auth=auth,
            log=folder / "pgbouncer.log",
            pid=folder / "pgbouncer.pid",
        )
    )
    for path in (auth, config):
        os.chmod(path, 0o644)
    command = [binary, str(config)]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "postgres"]
    # Its console output goes to a file, never to a pipe nobody reads: a full pipe (64 KiB of
    # log lines) blocks PgBouncer in write() and every client then times out connecting.
    console = (folder / "pgbouncer.out").open("w")
    proc = subprocess.Popen(command, stdout=console, stderr=subprocess.STDOUT)
    console.close()
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", listen), timeout=1).close()
            break
        except OSError as exc:
            if proc.poll() is not None or time.monotonic() > deadline:
                log = folder / "pgbouncer.log"
                text = log.read_text() if log.exists() else ""
                out = (folder / "pgbouncer.out").read_text()
                raise RuntimeError(f"pgbouncer did not start: {out} {text}") from exc
            time.sleep(0.1)
    yield listen
    proc.kill()  # no graceful drain: frozen test clients may still hold connections
    proc.wait(timeout=10)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def bouncer_db(proc_db: ProcDB, pgbouncer: int) -> ProcDB:
    """``proc_db``, reached through PgBouncer in transaction-pooling mode."""
    parts = urlsplit(proc_db.url)
    netloc = f"{parts.username or 'postgres'}@127.0.0.1:{pgbouncer}"
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return ProcDB(url, "postgresql", Path(proc_db.workdir), {"DATABASE_POOLER": "pgbouncer"})
