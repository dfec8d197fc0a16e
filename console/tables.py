"""How the console's long lists (the jobs list and the audit log) name things: an audit event's
subject link and its detail as one line.

Both lists write their rows in their templates (``console/jobs.html#job-rows``,
``console/audit.html#audit-rows``) and page by keyset (``console.keyset``); nothing here
counts or pages.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.urls import reverse

from audit.models import AuditEvent

# Characters of an audit event's detail shown collapsed in the log (the export has all of it).
DETAIL_PREVIEW = 160


def subject_url(event: AuditEvent) -> str:
    """Where an event's subject lives in the console."""
    if event.job_id:
        return reverse("console:job_detail", args=[event.job_id])
    if event.run_id:
        # Runs are shown per store on the runs page.
        url = reverse("console:runs")
        store = (event.detail or {}).get("store") if isinstance(event.detail, dict) else None
        return f"{url}?{urlencode({'store': store})}" if store else url
    return ""


def detail_text(detail: object, limit: int | None = DETAIL_PREVIEW) -> str:
    text = json.dumps(detail or {}, sort_keys=True, ensure_ascii=False, default=str)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"
