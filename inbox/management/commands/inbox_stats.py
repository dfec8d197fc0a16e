"""Print job counts by state and the age of the oldest READY job."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Count, Min

from core.clock import db_now
from inbox.management.commands._common import ConsoleCommand
from inbox.models import Job, JobState


class Command(ConsoleCommand):
    help = "Print job counts by state and the age of the oldest READY job (--json for scripts)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        counts = {state.value: 0 for state in JobState}
        for row in Job.objects.order_by().values("state").annotate(n=Count("job_id")):
            counts[row["state"]] = row["n"]
        oldest = Job.objects.ready().aggregate(oldest=Min("created_at"))["oldest"]
        age = (db_now() - oldest).total_seconds() if oldest else None
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {"counts": counts, "total": sum(counts.values()), "oldest_ready_age_s": age}
                )
            )
            return
        width = max(len(s) for s in counts)
        for state, n in counts.items():
            self.stdout.write(f"{state:<{width}}  {n:>10,}")
        self.stdout.write(f"{'total':<{width}}  {sum(counts.values()):>10,}")
        if age is None:
            self.stdout.write("oldest READY job: none")
        else:
            self.stdout.write(f"oldest READY job: {age:.1f} s old")
