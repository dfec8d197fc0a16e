"""The demo: its process supervisor, its trickle producer and seed_demo's idempotency."""

from __future__ import annotations

import io
import sys
import time

import pytest

from console.demo import ChildSpec, Supervisor

# A child that prints, then waits for SIGTERM and exits 0 (like our workers).
POLITE = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.05)\n"
)
# A child that ignores SIGTERM: the supervisor must kill it after the timeout.
STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.05)\n"
)


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


def test_stop_with_polite_and_stubborn_children_reports_each():
    out = io.StringIO()
    sup = Supervisor(
        [ChildSpec("polite", _py(POLITE)), ChildSpec("stubborn", _py(STUBBORN))],
        out=out,
        stop_timeout=1.5,
    )
    sup.start()
    _wait_for(lambda: out.getvalue().count("| ready") == 2)
    statuses = sup.stop()
    assert statuses == {"polite": 0, "stubborn": None}
    assert all(child.proc.poll() is not None for child in sup.children)


def test_poll_with_periodic_child_restarts_it_after_exit():
    out = io.StringIO()
    sup = Supervisor([ChildSpec("pass", _py("print('one pass')"), every=0.0)], out=out)
    sup.start()
    _wait_for(lambda: (sup.poll() or True) and len(sup.children[0].returncodes) >= 2)
    sup.stop()
    assert sup.children[0].returncodes[:2] == [0, 0]
    assert out.getvalue().count("one pass") >= 2


def test_poll_with_dead_essential_child_names_it():
    out = io.StringIO()
    sup = Supervisor([ChildSpec("web", _py("raise SystemExit(3)"), essential=True)], out=out)
    sup.start()
    died: list[str | None] = []
    _wait_for(lambda: died.append(sup.poll()) or died[-1] is not None)
    sup.stop()
    assert died[-1] == "web"
    assert "exited unexpectedly with 3" in out.getvalue()


def test_start_with_delayed_periodic_child_waits_for_its_turn():
    out = io.StringIO()
    sup = Supervisor([ChildSpec("later", _py("print('ran')"), every=60, delay=60)], out=out)
    sup.start()
    sup.poll()
    assert sup.children[0].proc is None
    sup.poll(now=time.monotonic() + 61)
    assert sup.children[0].proc is not None
    sup.stop()


def test_stop_sends_sigterm_not_sigint():
    out = io.StringIO()
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('got TERM', flush=True), sys.exit(0)))\n"
        "signal.signal(signal.SIGINT, lambda *a: (print('got INT', flush=True), sys.exit(1)))\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(0.05)\n"
    )
    sup = Supervisor([ChildSpec("w", _py(code))], out=out)
    sup.start()
    _wait_for(lambda: "| ready" in out.getvalue())
    assert sup.stop() == {"w": 0}
    assert "got TERM" in out.getvalue()


@pytest.mark.django_db
def test_trickle_tick_creates_ready_save_jobs():
    from console.demo import Trickle
    from inbox.models import Job, JobState

    trickle = Trickle(per_tick=3, crash_every=0, seed=1)
    trickle.tick()
    trickle.tick()
    jobs = Job.objects.filter(requested_by="demo-producer")
    assert jobs.count() == 6
    assert set(jobs.values_list("state", flat=True)) == {JobState.READY}


@pytest.mark.django_db
def test_trickle_crash_tick_leaves_a_held_claim_for_the_sweeper():
    from console.demo import PHANTOM_WORKER, Trickle
    from inbox.models import Job, JobState

    trickle = Trickle(per_tick=1, crash_every=1, crash_lease=30, seed=1)
    trickle.tick()
    held = Job.objects.filter(worker_id=PHANTOM_WORKER)
    assert list(held.values_list("state", flat=True)) == [JobState.CLAIMED]


# --- seed_demo ----------------------------------------------------------------------------------


@pytest.fixture
def seeded_env(settings, tmp_path, monkeypatch):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.VAULT_ROOT = tmp_path / "vault"
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-123")
    return tmp_path


def _seed() -> str:
    from django.core.management import call_command

    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_seed_demo_run_twice_writes_nothing_the_second_time(seeded_env):
    from audit.models import AuditEvent
    from inbox.models import Job, Worker
    from runs.models import Run

    def counts() -> tuple:
        workers = sorted(Worker.objects.values_list("worker_id", "last_seen_at", "status"))
        return (Job.objects.count(), AuditEvent.objects.count(), Run.objects.count(), workers)

    _seed()
    before = counts()
    second = _seed()
    after = counts()
    assert after == before
    assert "0 seeded" in second


@pytest.mark.django_db
def test_seed_demo_on_empty_database_reaches_every_state(seeded_env):
    from inbox.models import Job, JobState

    _seed()
    assert set(Job.objects.values_list("state", flat=True)) == set(JobState.values)


@pytest.mark.django_db
def test_seed_demo_jobs_have_trails_that_start_with_requested(seeded_env):
    from audit.models import AuditEvent, EventType
    from inbox.models import Job

    _seed()
    firsts = {}
    for event in AuditEvent.objects.filter(job_id__isnull=False).order_by("event_id"):
        firsts.setdefault(event.job_id, event.event_type)
    assert set(firsts) == set(Job.objects.values_list("job_id", flat=True))
    assert set(firsts.values()) == {EventType.REQUESTED}


@pytest.mark.django_db
def test_seed_demo_users_get_their_roles_and_the_demo_password(seeded_env):
    from django.contrib.auth import authenticate

    _seed()
    operator = authenticate(username="operator", password="demo-pass-123")
    approver = authenticate(username="approver", password="demo-pass-123")
    viewer = authenticate(username="viewer", password="demo-pass-123")
    admin = authenticate(username="admin", password="demo-pass-123")
    assert operator.has_perm("inbox.reconcile_job")
    assert not operator.has_perm("inbox.approve_delete")
    assert approver.has_perm("inbox.approve_delete")
    assert not approver.has_perm("inbox.reconcile_job")
    assert viewer.has_perm("inbox.view_job")
    assert not viewer.has_perm("inbox.pause_scope")
    assert admin.is_superuser


def test_demo_password_without_env_is_generated_once_and_kept(tmp_path, monkeypatch):
    from console.management.commands.seed_demo import demo_password

    monkeypatch.delenv("DEMO_PASSWORD", raising=False)
    first, _ = demo_password(tmp_path)
    second, source = demo_password(tmp_path)
    assert first == second
    assert source == str(tmp_path / "demo-password")
    assert (tmp_path / "demo-password").stat().st_mode & 0o077 == 0


@pytest.mark.django_db
def test_seed_demo_vault_holds_duplicates_and_a_stuck_run(seeded_env):
    from collections import Counter

    from inbox import vault
    from inbox.models import Job
    from runs.models import Run, RunStatus

    _seed()
    hashes = Counter(
        vault.probe(path).current_hash
        for path in Job.objects.filter(job_type="SAVE_OBJECT", state="SUCCEEDED").values_list(
            "vault_path", flat=True
        )
    )
    assert max(hashes.values()) >= 3
    assert Run.objects.filter(store="archive", status=RunStatus.ACTIVE).count() == 1


# --- the whole demo, as real processes ---------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_demo_then_sigint_serves_the_console_and_stops_every_child(proc_db):
    import os
    import signal
    import subprocess
    import urllib.request

    port = _free_port()
    proc_db.extra_env["DEMO_PASSWORD"] = "demo-pass-123"
    proc = proc_db.popen(
        "demo",
        "--bind",
        f"127.0.0.1:{port}",
        "--trickle",
        "1",
        "--web-workers",
        "1",
        stderr=subprocess.STDOUT,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "console:  http://" in line:
                break
        assert any(f"console:  http://127.0.0.1:{port}/" in line for line in lines), lines
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=10) as response:
            assert response.status == 200
        # The producer runs in the supervisor's own process: wait for one batch.
        while time.monotonic() < deadline and not any("| enqueued" in ln for ln in lines):
            lines.append(proc.stdout.readline())
        pids = [
            int(line.split("(pid ")[1].rstrip(")\n")) for line in lines if "started (pid" in line
        ]
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(lines) + rest
    assert "| demo stopped cleanly" in rest
    assert len(pids) == 5  # the reconciler waits its turn and had not started yet
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# --- the port ----------------------------------------------------------------------------------


def test_demo_port_from_flag_env_or_default_in_that_order():
    from console.management.commands.demo import resolve_bind

    none = {"bind": None, "port": None}
    assert resolve_bind(none, {}) == ("127.0.0.1", 8000)
    assert resolve_bind(none, {"PORT": "8001"}) == ("127.0.0.1", 8001)
    assert resolve_bind(none, {"DEMO_PORT": "8002"}) == ("127.0.0.1", 8002)
    assert resolve_bind({**none, "port": 8003}, {"PORT": "8001"}) == ("127.0.0.1", 8003)
    assert resolve_bind({"bind": "0.0.0.0:8004", "port": 8003}, {}) == ("0.0.0.0", 8004)


@pytest.mark.parametrize("value", ["abc", "0", "70000", "-1", "80.5"])
def test_demo_port_env_that_is_not_a_port_is_refused_by_name(value):
    from django.core.management.base import CommandError

    from console.management.commands.demo import resolve_bind

    with pytest.raises(CommandError, match="PORT environment variable must be a port number"):
        resolve_bind({"bind": None, "port": None}, {"PORT": value})


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--web-workers", "0"), ("--trickle", "-1"), ("--sweep-every", "0"), ("--run-lease", "0")],
)
def test_demo_flag_out_of_range_is_refused_not_clamped(flag, value):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=flag):
        call_command("demo", "--port", str(_free_port()), flag, value)


@pytest.mark.slow
def test_demo_on_busy_port_exits_nonzero_with_a_clear_message_before_starting(proc_db):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc_db.extra_env["PORT"] = str(port)
        result = proc_db.manage("demo", check=False, timeout=60)
    assert result.returncode != 0
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert f"make demo PORT={port + 1}" in result.stderr
    # Refused before anything started: no banner, no child, no migration output.
    assert "console:  http://" not in result.stdout
    assert "== migrate" not in result.stdout


@pytest.mark.django_db
def test_seed_demo_after_the_stuck_run_was_closed_seeds_a_new_one(seeded_env):
    """Every demo start shows a stuck run: one an operator closed is followed by a new one."""
    from runs.models import Run, RunStatus
    from runs.transitions import close_run

    _seed()
    [first] = Run.objects.filter(store="archive", status=RunStatus.ACTIVE)
    close_run(first.run_id, status=RunStatus.ABANDONED, actor="ops", reason="closed in the demo")
    _seed()
    [second] = Run.objects.filter(store="archive", status=RunStatus.ACTIVE)
    assert second.run_id != first.run_id
    assert Run.objects.get(run_id=first.run_id).status == RunStatus.ABANDONED
