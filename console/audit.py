"""The audit log page and its streamed CSV export (read only; login and view permission)."""

from __future__ import annotations

import csv
from collections.abc import Iterator

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django_tables2 import RequestConfig
from django_tables2.paginators import LazyPaginator

from audit.models import AuditEvent
from console.filters import AuditEventFilter
from console.htmx import region_template
from console.policy import page
from console.tables import AuditEventTable, detail_text, label_page

AUDIT = "console/audit.html"

PER_PAGE = 50
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


@page(permission="audit.view_auditevent")
def event_list(request: HttpRequest) -> HttpResponse:
    """The audit log, filterable by type, actor, job, run and time; HTMX swaps the table."""
    event_filter, qs = _filtered(request.GET)
    table = AuditEventTable(qs)
    RequestConfig(
        request, paginate={"per_page": PER_PAGE, "paginator_class": LazyPaginator}
    ).configure(table)
    label_page(table, qs)
    context = {
        "filter": event_filter,
        "table": table,
        "export_query": request.GET.urlencode(),
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
