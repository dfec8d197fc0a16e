"""`make demo`: migrate, seed, and run the console with every worker until Ctrl-C.

Starts the web server (gunicorn), a save and a delete executor, the stale-claim sweeper, the
auto-reconciler, a consolidator and a small producer that trickles SAVE jobs in, then prints the
URL and the demo password. Ctrl-C (or SIGTERM) stops each child with SIGTERM, waits for it and
reports how every one ended. The process plumbing lives in ``console.demo``.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from console.demo import ChildSpec, Supervisor, Trickle, manage
from console.management.commands.seed_demo import USERS, demo_password

READY_TIMEOUT = 30.0
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# The environment variables that pick the port (`make demo PORT=8001` puts PORT there).
PORT_ENV = ("PORT", "DEMO_PORT")


def _port(text: str, source: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise CommandError(f"{source} must be a port number from 1 to 65535, got {text!r}")
    return int(text)


def _split_bind(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit():
        raise CommandError(f"--bind must be host:port, got {bind!r}")
    return host, _port(port, "the port in --bind")


def resolve_bind(options: dict[str, Any], environ: dict[str, str] | None = None) -> tuple[str, int]:
    """Where the console serves: ``--bind host:port`` wins, then ``--port``, then the PORT (or
    DEMO_PORT) environment variable, then 127.0.0.1:8000. A bad value is refused by name."""
    environ = os.environ if environ is None else environ
    if options.get("bind"):
        return _split_bind(options["bind"])
    if options.get("port") is not None:
        return DEFAULT_HOST, _port(str(options["port"]), "--port")
    for name in PORT_ENV:
        value = environ.get(name, "").strip()
        if value:
            return DEFAULT_HOST, _port(value, f"the {name} environment variable")
    return DEFAULT_HOST, DEFAULT_PORT


def check_port_free(host: str, port: int) -> None:
    """Refuse, before anything starts, a port another process already listens on."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CommandError(
                    f"port {port} on {host} is already in use (another demo or server?). "
                    f"Stop it, or pick another port: make demo PORT={port + 1} "
                    f"(or manage.py demo --port {port + 1})"
                ) from exc
            raise CommandError(f"cannot serve on {host}:{port}: {exc.strerror}") from exc


def wait_until_up(url: str, *, timeout: float, alive: Any) -> bool:
    """Poll ``url`` until it answers 200 (or the server died, or time ran out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    return False


# The demo's knobs: (flag, type, default, help); ``--bind`` takes a host:port as text.
OPTIONS: tuple[tuple[str, type, Any, str], ...] = (
    (
        "--port",
        int,
        None,
        "port to serve on at 127.0.0.1; default: the PORT (or DEMO_PORT) environment "
        "variable, else 8000 (`make demo PORT=8001` sets it). A busy port is refused.",
    ),
    ("--lease", int, 15, "executor lease in seconds (default 15)"),
    ("--poll", float, 1.0, "executor poll interval in seconds (1)"),
    (
        "--trickle",
        float,
        6.0,
        "seconds between batches of new SAVE jobs; 0 turns the producer off (6)",
    ),
    ("--sweep-every", float, 5.0, "sweeper interval in seconds (5)"),
    (
        "--reconcile-every",
        float,
        45.0,
        "seconds before the auto-reconciler's first pass and between passes (45)",
    ),
    ("--store", str, "vault", "store the consolidator works on (vault)"),
    ("--run-lease", int, 60, "consolidation run lease in seconds (60)"),
    ("--web-workers", int, 2, "gunicorn worker processes (2)"),
)


def _executor(scope: str, options: dict[str, Any]) -> ChildSpec:
    """An executor of one scope; progress lines every 30 s keep the terminal readable beside
    the producer's lines."""
    lease, poll = str(options["lease"]), str(options["poll"])
    quiet = ("--progress-every", "30")
    return ChildSpec(
        scope, manage("run_executor", "--scope", scope, "--lease", lease, "--poll", poll, *quiet)
    )


def _report(supervisor: Supervisor, statuses: dict[str, int | None]) -> bool:
    """Say how each process stopped; True when every one stopped cleanly."""
    clean = True
    for name, status in statuses.items():
        if status is None:
            verdict = "killed (did not stop in time)"
            clean = False
        elif status in (0, -signal.SIGTERM):
            verdict = "stopped"
        else:
            verdict = f"exited {status}"
            clean = False
        supervisor.say("demo", f"  {name:<12} {verdict}")
    return clean


def _stop_on_signals() -> dict[str, bool]:
    """Ctrl-C and SIGTERM set the returned flag; a second one stops waiting."""
    stopping = {"flag": False}

    def on_signal(signum: int, frame: Any) -> None:
        if stopping["flag"]:
            raise KeyboardInterrupt  # a second Ctrl-C: stop waiting, kill what is left
        stopping["flag"] = True

    # Ctrl-C and SIGTERM both stop the demo between two supervisor turns (never in the
    # middle of the producer's transaction). Set explicitly: a shell that starts the demo
    # in the background hands it SIGINT ignored.
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stopping


def _announce(supervisor: Supervisor, url_host: str, port: int, bind: str) -> None:
    """Once the web server answers, print the URL, the users and the password."""
    web = supervisor.children[0].proc
    up = wait_until_up(
        f"http://{url_host}:{port}/healthz",
        timeout=READY_TIMEOUT,
        alive=lambda: web is not None and web.poll() is None,
    )
    if not up:
        supervisor.say("demo", f"the web server does not answer on {bind}")
        return
    password, _source = demo_password()
    for line in (
        "",
        f"console:  http://{url_host}:{port}/",
        f"users:    {', '.join(USERS)}   password: {password}",
        "Ctrl-C stops everything.",
        "",
    ):
        supervisor.say("demo", line)


class Command(BaseCommand):
    help = (
        "Run the whole demo on the configured database (SQLite under var/ by default): migrate, "
        "seed_demo, then start the web server, a save and a delete executor, the sweeper, the "
        "auto-reconciler (first pass after --reconcile-every), a consolidator, and a producer "
        "that trickles new SAVE jobs in (every fourth batch one is claimed by a simulated "
        "crashed worker, so a lease lapses and the sweeper recovers it); print the URL and the "
        "demo password. Ctrl-C or SIGTERM stops every process (SIGTERM, wait, kill stragglers, "
        "report); a second Ctrl-C stops waiting."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--bind",
            default=None,
            help="host:port to serve on (default 127.0.0.1 and the port below)",
        )
        for flag, kind, default, text in OPTIONS:
            parser.add_argument(flag, type=kind, default=default, help=text)

    @staticmethod
    def check_options(options: dict[str, Any]) -> None:
        """Every knob is honoured as given or refused: nothing is silently clamped."""
        if options["lease"] < 2 or options["poll"] <= 0:
            raise CommandError("--lease must be at least 2 s and --poll positive")
        if options["web_workers"] < 1:
            raise CommandError(f"--web-workers must be at least 1, got {options['web_workers']}")
        if options["trickle"] < 0:
            raise CommandError(f"--trickle must be 0 (off) or more, got {options['trickle']}")
        for name in ("sweep_every", "reconcile_every"):
            if options[name] <= 0:
                flag = "--" + name.replace("_", "-")
                raise CommandError(f"{flag} must be positive, got {options[name]}")
        if options["run_lease"] < 1:
            raise CommandError(f"--run-lease must be at least 1 s, got {options['run_lease']}")

    def children(self, options: dict[str, Any]) -> list[ChildSpec]:
        return [
            ChildSpec(
                "web",
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    "config.wsgi",
                    "--bind",
                    options["bind"],
                    "--workers",
                    str(options["web_workers"]),
                    "--graceful-timeout",
                    "5",
                ],
                essential=True,
            ),
            _executor("save", options),
            _executor("delete", options),
            ChildSpec(
                "sweeper",
                manage("recover_stale", "--loop", "--interval", str(options["sweep_every"])),
            ),
            # Its first pass waits a while, so a newcomer sees the unknown outcomes first.
            ChildSpec(
                "reconcile",
                manage(
                    "reconcile",
                    "--auto",
                    "--loop",
                    "--interval",
                    str(options["reconcile_every"]),
                    "--quiet",
                ),
                delay=options["reconcile_every"],
            ),
            ChildSpec(
                "consolidate",
                manage(
                    "run_consolidator",
                    "--store",
                    options["store"],
                    "--lease",
                    str(options["run_lease"]),
                    # Plan again soon after a run completes: new duplicates keep arriving.
                    "--idle",
                    "15",
                ),
            ),
        ]

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = resolve_bind(options)
        options["bind"] = f"{host}:{port}"
        self.check_options(options)
        # Before migrating or starting anything: a busy port is a clear message and exit 1, not
        # a URL banner followed by "the web process died".
        check_port_free(host, port)
        self.stdout.write("== migrate")
        call_command("migrate", verbosity=0)
        self.stdout.write("== seed_demo")
        call_command("seed_demo", stdout=self.stdout)

        stopping = _stop_on_signals()
        supervisor = Supervisor(self.children(options), out=self.stdout)
        trickle = Trickle(say=lambda line: supervisor.say("producer", line))
        url_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        announced = {"flag": False}

        def tick() -> None:
            if not announced["flag"]:
                announced["flag"] = True
                _announce(supervisor, url_host, port, options["bind"])
            if options["trickle"] > 0:
                trickle.tick()

        try:
            died = supervisor.run(
                tick=tick,
                tick_every=options["trickle"] if options["trickle"] > 0 else 3600.0,
                should_stop=lambda: stopping["flag"],
            )
        finally:
            # Whatever ended the loop (even a broken terminal), the children are stopped.
            supervisor.say("demo", "stopping: SIGTERM to every process, waiting for each")
            statuses = supervisor.stop()
        clean = _report(supervisor, statuses)
        if died:
            raise CommandError(f"the {died} process died; the demo stopped")
        supervisor.say("demo", "demo stopped cleanly" if clean else "demo stopped (see above)")
