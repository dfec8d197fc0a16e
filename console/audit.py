"""The audit log page and its streamed CSV export (read only; login and view permission).

The log pages by keyset on ``event_id`` (newest first; every filter column has an
``(x, event_id)`` index), so any page costs what the first costs. Events never change: the
first page's poll only asks how many arrived above it ("12 new events") and answers 204 while
that number stays the same.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from audit.models import AuditEvent
from console import keyset
from console.filters import AuditEventFilter
from console.htmx import NEWER_CAP, live_rows, poll_answer, region_template
from console.policy import page
from console.tables import detail_text
from core.clock import db_now
from core.paging import capped_count, count_label

AUDIT = "console/audit.html"

PER_PAGE = 50
ORDERING = keyset.Ordering("-event_id", ("event_id",), True, "event")
POLL_SECONDS = 10
# The most rows one export streams; narrow the filter for more.
EXPORT_MAX_ROWS = 1_000_000
EXPORT_COLUMNS = (
    "event_id",
    "created_at",
    "event_type",
    "actor",
    "job_id",
    "run_id",
    "result_code",
    "detail",
)


def _filtered(params) -> tuple[AuditEventFilter, object]:
    event_filter = AuditEventFilter(params or None, queryset=AuditEvent.objects.all())
    qs = event_filter.qs if event_filter.is_bound else AuditEvent.objects.all()
    # Newest first by the primary key: every filter column has an (x, event_id) index.
    return event_filter, qs.order_by("-event_id")


def pretty_detail(detail: object) -> str:
    """An event's detail as indented JSON for the expandable cell (autoescaped)."""
    return json.dumps(detail or {}, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@page(permission="audit.view_auditevent")
def event_list(request: HttpRequest) -> HttpResponse:
    """The audit log, filterable by type, actor, job, run and time; HTMX swaps the table."""
    event_filter, qs = _filtered(request.GET)
    listing = keyset.paginate(qs, ORDERING, request.GET, per_page=PER_PAGE)
    top = listing.at_start or request.GET.get("top") == "1"
    newer = 0
    if top and not listing.at_start:
        if listing.rows:
            above = keyset.seek(
                qs, ORDERING, [listing.rows[0].event_id], backward=True, inclusive=False
            )
            # Nearest first along the primary key: a range scan that stops at the cap. Unordered,
            # a planner whose statistics lag the appends (a drain writes five events a job)
            # chose a sequential scan of the whole log: 36 ms a poll at 400,000 events.
            nearest = above.order_by(*ORDERING.order_by(reverse=True))
            newer = capped_count(nearest, NEWER_CAP, keep_order=True)
        else:
            newer = capped_count(qs, NEWER_CAP)
    ids = ",".join(str(event.event_id) for event in listing.rows)
    token = hashlib.sha1(f"{ids}|{newer}".encode()).hexdigest()[:16]
    rows_context = {
        "events": [(event, pretty_detail(event.detail)) for event in listing.rows],
        **live_rows(request, listing, top=top, newer=newer, token=token),
        "now": db_now(),
        "poll_seconds": POLL_SECONDS,
    }
    polled = poll_answer(
        request, region="audit-rows", template=AUDIT, token=token, context=rows_context
    )
    if polled is not None:
        return polled
    context = {
        **rows_context,
        "filter": event_filter,
        "listing": listing,
        "total_label": count_label(capped_count(qs)),
        "export_query": keyset.query_string(request.GET, drop=(*keyset.CURSOR_PARAMS, "top")),
    }
    template = region_template(request, AUDIT, ("audit-table",), default="audit-table")
    return render(request, template, context)


class _Echo:
    """A write-only file for csv.writer: each row goes straight to the response stream."""

    def write(self, value: str) -> str:
        return value


def _safe_cell(value: object) -> str:
    """Neutralise spreadsheet formulas (CSV injection) in user-supplied text."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _csv_rows(qs) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(EXPORT_COLUMNS)
    for event in qs[:EXPORT_MAX_ROWS].iterator(chunk_size=2000):
        yield writer.writerow(
            [
                event.event_id,
                event.created_at.isoformat(),
                event.event_type,
                _safe_cell(event.actor),
                _safe_cell(event.job_id),
                _safe_cell(event.run_id),
                _safe_cell(event.result_code),
                _safe_cell(detail_text(event.detail, limit=None)),
            ]
        )


@page(permission="audit.view_auditevent")
def event_export(request: HttpRequest) -> HttpResponse:
    """The current filter as CSV, streamed row by row (memory stays flat at any size)."""
    _filter, qs = _filtered(request.GET)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response = StreamingHttpResponse(_csv_rows(qs), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
    return response
