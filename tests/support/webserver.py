"""The console served by gunicorn, as in production, for tests that talk HTTP to it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.procdb import ROOT, ProcDB


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=2).close()
            return
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextmanager
def gunicorn(db: ProcDB, **env: str) -> Iterator[str]:
    """gunicorn on a free port against ``db`` (``env`` on top of its environment); the base URL."""
    port = free_port()
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}"],
        env=db.env(DJANGO_DEBUG="0", **env),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url)
        yield url
    finally:
        web.terminate()
        web.wait(timeout=30)
