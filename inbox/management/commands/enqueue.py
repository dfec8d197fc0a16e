"""Read job documents as JSON Lines and store the good ones (DESIGN §1.8)."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from inbox.errors import InboxError, JobValidationError
from inbox.transitions import create_job


class Command(BaseCommand):
    help = (
        "Read jobs as JSON Lines from FILE (or '-' for standard input) and store each valid one. "
        "Prints created / replayed / refused counts and every refusal with its line number and "
        "reasons. Exits 1 if any line was refused; refused lines store nothing."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", nargs="?", default="-", help="JSON Lines file, or - (stdin)")
        parser.add_argument(
            "--requested-by",
            default="enqueue",
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
        created = replayed = 0
        refusals: list[tuple[int, list[str]]] = []
        with stream:
            for lineno, raw in enumerate(stream, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    refusals.append((lineno, [f"not valid UTF-8 at byte {exc.start + 1}"]))
                    continue
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    refusals.append((lineno, [f"not valid JSON: {exc.msg} at column {exc.colno}"]))
                    continue
                except RecursionError:
                    refusals.append((lineno, ["not valid JSON: nested too deeply"]))
                    continue
                try:
                    _job, was_created = create_job(data, requested_by=options["requested_by"])
                except JobValidationError as exc:
                    refusals.append((lineno, exc.problems))
                    continue
                except InboxError as exc:
                    refusals.append((lineno, [str(exc)]))
                    continue
                if was_created:
                    created += 1
                else:
                    replayed += 1
        for lineno, problems in refusals:
            self.stderr.write(f"line {lineno}: refused: " + "; ".join(problems))
        self.stdout.write(f"created {created}, replayed {replayed}, refused {len(refusals)}")
        if refusals:
            sys.exit(1)
