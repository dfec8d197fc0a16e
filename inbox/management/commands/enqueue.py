"""Read job documents as JSON Lines and store the good ones; a bad line is refused with its
reason and the rest of the file goes on."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import CommandError

from core import jsondoc
from inbox.errors import JobValidationError
from inbox.management.commands._common import ConsoleCommand, column
from inbox.models import Job
from inbox.transitions import create_jobs

# Lines stored per transaction.
BATCH = 500


class Command(ConsoleCommand):
    help = (
        "Read jobs as JSON Lines from FILE (or '-' for standard input) and store each valid one. "
        "Prints created / replayed / refused counts and every refusal with its line number and "
        "reasons. Valid lines are stored in batches of 500, one transaction each (create_jobs). "
        "Exits 1 if any line was refused; refused lines store nothing."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", nargs="?", default="-", help="JSON Lines file, or - (stdin)")
        parser.add_argument(
            "--requested-by",
            default="enqueue",
            type=column(Job, "requested_by"),
            help="who asks for these jobs (recorded on REQUESTED events); default: enqueue",
        )
        parser.add_argument("--quiet", action="store_true", help="print only the summary")

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"]
        try:
            # Bytes, decoded line by line: one undecodable line is refused, not fatal.
            stream = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
        self.created = self.replayed = 0
        self.refusals: list[tuple[int, list[str]]] = []
        pending: list[tuple[int, Any]] = []
        with stream:
            for lineno, raw in enumerate(stream, start=1):
                data = self._parse(lineno, raw)
                if data is not None:
                    pending.append((lineno, data))
                if len(pending) >= BATCH:
                    self._store(pending, options["requested_by"])
                    pending = []
        self._store(pending, options["requested_by"])
        for lineno, problems in sorted(self.refusals):
            self.stderr.write(f"line {lineno}: refused: " + "; ".join(problems))
        self.stdout.write(
            f"created {self.created}, replayed {self.replayed}, refused {len(self.refusals)}"
        )
        if self.refusals:
            sys.exit(1)

    def _parse(self, lineno: int, raw: bytes) -> Any:
        """The line's document, or None (blank, or refused with the reason)."""
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.refusals.append((lineno, [f"not valid UTF-8 at byte {exc.start + 1}"]))
            return None
        if not line.strip():
            return None
        try:
            return jsondoc.loads(line)
        except jsondoc.DuplicateKey as exc:
            self.refusals.append((lineno, [f"not valid JSON: {exc}"]))
        except json.JSONDecodeError as exc:
            self.refusals.append((lineno, [f"not valid JSON: {exc.msg} at column {exc.colno}"]))
        except RecursionError:
            self.refusals.append((lineno, ["not valid JSON: nested too deeply"]))
        except ValueError as exc:
            # e.g. an integer literal longer than Python's int-to-string limit
            self.refusals.append((lineno, [f"not valid JSON: {exc}"]))
        return None

    def _store(self, pending: list[tuple[int, Any]], requested_by: str) -> None:
        """One ``create_jobs`` call (one transaction) for a batch of parsed lines."""
        if not pending:
            return
        result = create_jobs([data for _lineno, data in pending], requested_by=requested_by)
        self.created += len(result.created)
        self.replayed += len(result.replayed)
        for position, exc in result.refused.items():
            problems = exc.problems if isinstance(exc, JobValidationError) else [str(exc)]
            self.refusals.append((pending[position][0], problems))
