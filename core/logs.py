"""JSON log lines with the worker, job and claim in hand (``LOG_FORMAT=json``).

A stdlib ``logging.Formatter`` and two kinds of context, so every process — web, workers and
maintenance commands — writes one JSON object a line that a log shipper can index:

- ``bind_process(worker_id=...)``: facts true for the whole process (a worker process runs one
  loop). Every thread sees them, the executor's lease keeper included: Python threads start
  with an empty ``contextvars`` context, so a per-context value would miss them.
- ``bound(job_id=..., claim_id=...)``: facts true while one piece of work runs (a contextvar;
  nested blocks add to it and restore it on the way out).

A record's own ``extra={...}`` fields win over both. ``worker_out`` routes a worker's progress
lines through logging in JSON mode, so nothing a worker prints breaks the one-object-a-line
rule. Callers: ``config.settings`` (the formatter), ``inbox.loop`` / ``inbox.executor`` (the
bindings), maintenance commands (``worker_out``), ``gunicorn.conf.py`` (the web server's own
lines). This module imports no app.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import os
from collections.abc import Callable
from typing import Any

# The keys this module knows; anything else in a record's ``extra`` is passed through too.
CONTEXT_KEYS = ("worker_id", "job_id", "claim_id", "run_id")

_process: dict[str, str] = {}
_work: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "console_log_context", default=None
)

# Attributes every LogRecord has; what is left on a record came from ``extra=``.
_STANDARD = frozenset(
    set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__)
    | {"message", "asctime", "taskName"}
)


def json_enabled() -> bool:
    """True when ``LOG_FORMAT=json`` (read from the environment: gunicorn's config and the
    signal-safe writer need it before or without Django settings)."""
    return os.environ.get("LOG_FORMAT", "").strip().lower() == "json"


def bind_process(**values: str) -> None:
    """Facts for the rest of this process's life (a worker's id); empty values unbind."""
    for key, value in values.items():
        if value:
            _process[key] = str(value)
        else:
            _process.pop(key, None)


class bound:
    """Facts for the work inside the block (a job and its claim); restored on exit.

    A class, not a generator context manager: an executor enters one per job, and the
    generator's machinery cost more than the facts themselves."""

    __slots__ = ("_token", "_values")

    def __init__(self, **values: str) -> None:
        self._values = values

    def __enter__(self) -> None:
        current = dict(_work.get() or {})
        current.update({k: str(v) for k, v in self._values.items() if v})
        self._token = _work.set(current)

    def __exit__(self, *exc_info: object) -> None:
        _work.reset(self._token)


def context() -> dict[str, str]:
    """The facts bound right now: the process's, then the work's on top."""
    return {**_process, **(_work.get() or {})}


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, dict | list | tuple):
        try:
            json.dumps(value)
            return value
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, pid, the bound
    context and the record's extras; a traceback goes in ``exc`` as one string."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,
        }
        data.update(context())
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = _jsonable(value)
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        # One line whatever the message holds: json.dumps escapes newlines.
        return json.dumps(data, ensure_ascii=False, default=str)


def raw_line(text: str) -> bytes:
    """A line for ``os.write`` from a signal handler (no logging there): JSON in JSON mode."""
    if not json_enabled():
        return f"{text}\n".encode()
    data = {
        "ts": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "level": "info",
        "logger": "signal",
        "msg": text,
        "pid": os.getpid(),
        **_process,
    }
    return (json.dumps(data, ensure_ascii=False) + "\n").encode()


def worker_out(out: Callable[[str], Any], logger: str = "worker") -> Callable[[str], Any]:
    """``out`` itself, or in JSON mode a function that logs each line at INFO instead."""
    if not json_enabled():
        return out
    log = logging.getLogger(logger)

    def emit(line: str) -> None:
        log.info(line.rstrip("\n"))

    return emit


def gunicorn_logconfig() -> dict[str, Any]:
    """gunicorn's own loggers (``gunicorn.error``, ``gunicorn.access``) as JSON on stderr."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "core.logs.JsonFormatter"}},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "json"},
        },
        "root": {"handlers": ["stderr"], "level": "INFO"},
        "loggers": {
            "gunicorn.error": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "gunicorn.access": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        },
    }
