"""Command-line arguments are checked before any database sees them.

Every management command of the project derives from ``ConsoleCommand``: a NUL byte or
non-UTF-8 bytes in any argument, and text longer than the column it is stored in, are refused
with a message naming the argument (``CommandError`` through ``call_command``, exit 2 with the
message from the command line) — not a PostgreSQL traceback or a silently cut value.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError

from inbox.management.commands._common import REASON_MAX, ConsoleCommand
from inbox.models import Job, JobState
from tests.factories import make_job

PROJECT_APPS = ("inbox", "runs")
COMMANDS = sorted(name for name, app in get_commands().items() if app in PROJECT_APPS)


def _parser(name: str):
    command = load_command_class(get_commands()[name], name)
    return command, command.create_parser("manage.py", name)


def _value_actions(name: str) -> Iterator:
    _command, parser = _parser(name)
    for action in parser._actions:
        if action.nargs != 0:
            yield action


def test_every_project_command_is_a_console_command() -> None:
    assert {"approve", "enqueue", "run_executor", "run_consolidator", "close_run"} <= set(COMMANDS)
    for name in COMMANDS:
        command = _parser(name)[0]
        assert isinstance(command, ConsoleCommand), name


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("bad", ["a\x00b", "bad\udcffbytes"], ids=["nul", "not-utf8"])
def test_every_argument_of_every_command_refuses_unstorable_text(name: str, bad: str) -> None:
    """Each argument's ``type`` refuses it — Django's own (--settings…) included."""
    import argparse

    for action in _value_actions(name):
        with pytest.raises(argparse.ArgumentTypeError):
            action.type(bad)


# (command, arguments before the one under test, option, column length, arguments after)
LIMITS = [
    ("approve", ["j1"], "--as", 150, ["--reason", "r"]),
    ("approve", ["j1", "--as", "u"], "--reason", REASON_MAX, []),
    ("deny", ["j1", "--reason", "r"], "--as", 150, []),
    ("revoke_approval", ["a1", "--reason", "r"], "--as", 150, []),
    ("enqueue", ["-"], "--requested-by", 200, []),
    ("pause", ["save", "--reason", "r"], "--as", 200, []),
    ("pause", ["save"], "--reason", REASON_MAX, []),
    ("resume", ["save"], "--as", 200, []),
    ("reconcile", [], "--as", 200, []),
    ("recover_stale", [], "--as", 200, []),
    ("run_executor", ["--scope", "save"], "--worker-id", 200, []),
    ("run_consolidator", ["--store", "s"], "--worker-id", 200, []),
    ("run_consolidator", [], "--store", 200, []),
    ("runs", [], "--store", 200, []),
    ("close_run", ["r1", "--reason", "r"], "--as", 150, []),
    ("close_run", ["r1", "--as", "u"], "--reason", REASON_MAX, []),
]


@pytest.mark.parametrize(
    ("name", "before", "option", "limit", "after"),
    LIMITS,
    ids=[f"{c}{o}" for c, _b, o, _l, _a in LIMITS],
)
def test_argument_longer_than_its_column_is_refused(name, before, option, limit, after) -> None:
    _command, parser = _parser(name)
    fits = parser.parse_args([*before, option, "x" * limit, *after])
    assert len(next(v for v in vars(fits).values() if v == "x" * limit)) == limit
    with pytest.raises(CommandError, match=rf"argument {option}: .*at most {limit} fit"):
        parser.parse_args([*before, option, "x" * (limit + 1), *after])


@pytest.mark.parametrize(
    ("name", "argv", "positional"),
    [
        ("approve", ["--as", "u", "--reason", "r"], "j" * 201),
        ("pause", ["--reason", "r"], "s" * 33),
        ("revoke_approval", ["--as", "u", "--reason", "r"], "a" * 65),
        ("close_run", ["--as", "u", "--reason", "r"], "r" * 65),
    ],
)
def test_positional_id_longer_than_its_column_is_refused(name, argv, positional) -> None:
    _command, parser = _parser(name)
    with pytest.raises(CommandError, match=r"at most \d+ fit"):
        parser.parse_args([positional, *argv])


@pytest.mark.django_db
def test_call_command_with_nul_reason_is_refused_and_writes_nothing() -> None:
    job = make_job("delete", JobState.CREATED)
    with pytest.raises(CommandError, match="argument --reason: contains a NUL byte"):
        call_command(
            "deny", job.job_id, "--as", "someone", "--reason", "no\x00", stdout=io.StringIO()
        )
    assert Job.objects.get(job_id=job.job_id).state == JobState.CREATED


@pytest.mark.django_db
def test_enqueue_with_long_requested_by_is_refused_from_the_command_line(proc_db) -> None:
    line = '{"job_id": "x"}\n'
    proc = proc_db.manage("enqueue", "--requested-by", "p" * 201, "-", check=False, input=line)
    assert proc.returncode == 2
    assert "argument --requested-by: is 201 characters long; at most 200 fit" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc_db.scalar("SELECT COUNT(*) FROM inbox_job") == 0


def test_worker_id_longer_than_its_column_is_refused_from_the_command_line(proc_db) -> None:
    proc = proc_db.manage(
        "run_executor", "--scope", "save", "--worker-id", "w" * 201, "--exit-when-idle", check=False
    )
    assert proc.returncode == 2
    assert "argument --worker-id: is 201 characters long; at most 200 fit" in proc.stderr
    assert proc_db.scalar("SELECT COUNT(*) FROM inbox_worker") == 0


@pytest.mark.parametrize(
    ("name", "args", "words"),
    [
        # --exit-when-idle / --once: without the guard the worker ends instead of hanging.
        (
            "run_executor",
            ["--scope", "save", "--sweep-every", "-3", "--exit-when-idle"],
            "--sweep-every must be 0",
        ),
        (
            "run_consolidator",
            ["--store", "vault", "--idle", "-1", "--once"],
            "--idle must be 0 or more",
        ),
        ("runs", ["--limit", "0"], "--limit must be at least 1"),
    ],
)
@pytest.mark.django_db
def test_out_of_range_worker_flags_are_refused_not_clamped(name, args, words) -> None:
    """A flag out of its range is an error that names it, never silently moved into range."""
    with pytest.raises(CommandError, match=words):
        call_command(name, *args, stdout=io.StringIO())
