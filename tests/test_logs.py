"""JSON logs: the formatter, the bound context, and real processes — an executor and
gunicorn — writing nothing but JSON objects, one a line, with LOG_FORMAT=json."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from core import logs
from tests.support.procdb import MANAGE, ROOT


def _record(msg: str, *args, exc_info=None, **extra) -> logging.LogRecord:
    record = logging.getLogger("t").makeRecord(
        "t", logging.WARNING, __file__, 1, msg, args, exc_info, extra=extra or None
    )
    return record


def test_json_formatter_writes_one_object_with_context_and_extras() -> None:
    formatter = logs.JsonFormatter()
    logs.bind_process(worker_id="executor-save-h-1-abcd")
    try:
        with logs.bound(job_id="j-1", claim_id="c-1"):
            with logs.bound(job_id="j-2"):
                inner = json.loads(formatter.format(_record("a\nb %s", "x", run_id="r-9")))
            outer = json.loads(formatter.format(_record("outer")))
        after = json.loads(formatter.format(_record("after")))
    finally:
        logs.bind_process(worker_id="")
    assert inner["msg"] == "a\nb x"
    assert inner["level"] == "warning" and inner["logger"] == "t"
    assert (inner["worker_id"], inner["job_id"], inner["claim_id"]) == (
        "executor-save-h-1-abcd",
        "j-2",
        "c-1",
    )
    assert inner["run_id"] == "r-9"
    assert outer["job_id"] == "j-1"
    assert "job_id" not in after and after["worker_id"] == "executor-save-h-1-abcd"
    assert "\n" not in formatter.format(_record("multi\nline"))


def test_json_formatter_puts_the_traceback_in_one_field() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        line = logs.JsonFormatter().format(_record("failed", exc_info=sys.exc_info()))
    data = json.loads(line)
    assert "RuntimeError: boom" in data["exc"]
    assert "\n" not in line


def test_worker_out_routes_lines_through_logging_only_in_json_mode(monkeypatch, caplog) -> None:
    lines: list[str] = []
    append = lines.append
    monkeypatch.delenv("LOG_FORMAT", raising=False)
    assert logs.worker_out(append) is append
    monkeypatch.setenv("LOG_FORMAT", "json")
    out = logs.worker_out(append)
    with caplog.at_level(logging.INFO, logger="worker"):
        out("progress: 3 done\n")
    assert lines == []
    assert caplog.records[-1].getMessage() == "progress: 3 done"
    assert json.loads(logs.raw_line("SIGTERM: stopping"))["msg"] == "SIGTERM: stopping"


def _json_lines(text: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
    assert all(isinstance(p, dict) for p in parsed)
    return parsed


@pytest.mark.slow
def test_executor_with_json_logs_writes_only_json_with_worker_job_and_claim(proc_db) -> None:
    env = proc_db.env(LOG_FORMAT="json", DJANGO_SETTINGS_MODULE="tests.support.json_log_settings")
    doc = {
        "job_id": "boom-1",
        "job_version": 1,
        "mission_id": "m",
        "job_type": "BOOM_NOOP",
        "object_id": "o-1",
        "vault_path": "o/1",
        "idempotency_key": "boom-1",
    }
    enqueue = subprocess.run(
        [sys.executable, MANAGE, "enqueue", "-"],
        input=json.dumps(doc) + "\n",
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert enqueue.returncode == 0, enqueue.stderr
    run = subprocess.run(
        [sys.executable, MANAGE, "run_executor", "--scope", "boom", "--exit-when-idle"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    records = _json_lines(run.stdout) + _json_lines(run.stderr)
    worker_ids = {r.get("worker_id") for r in records}
    assert len(worker_ids) == 1 and next(iter(worker_ids)).startswith("executor-boom-")
    [raised] = [r for r in records if "raised" in r["msg"]]
    claim_id = proc_db.scalar("SELECT claim_id FROM inbox_job WHERE job_id = %s", ["boom-1"])
    assert raised["job_id"] == "boom-1"
    assert raised["claim_id"] == claim_id
    assert "RuntimeError: boom on boom-1" in raised["exc"]
    assert any(r["msg"].startswith("executor ") and "stopped" in r["msg"] for r in records)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_gunicorn_with_json_logs_writes_only_json(proc_db) -> None:
    port = _free_port()
    env = proc_db.env(LOG_FORMAT="json", DJANGO_DEBUG="0")
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        with pytest.raises(urllib.error.HTTPError):  # logged by django.request as a warning
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/jobs/nope", timeout=5)
    finally:
        web.terminate()
        out, err = web.communicate(timeout=30)
    records = _json_lines(out) + _json_lines(err)
    assert any(r["logger"] == "gunicorn.error" for r in records)
    assert any(r["logger"] == "django.request" and r.get("status_code") == 401 for r in records)
    assert os.environ.get("LOG_FORMAT", "") != "json"  # the test process itself is untouched
