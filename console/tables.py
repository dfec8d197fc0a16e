"""The console's django-tables2 tables: the jobs list and the audit log.

Both sort only on indexed columns and page with ``LazyPaginator`` (no COUNT(*)); ``label_page``
adds a capped total. Their rows are written by their templates, not cell by cell.
"""

from __future__ import annotations

import datetime as dt
import json
from urllib.parse import urlencode

import django_tables2 as tables
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import dateformat, timezone

from audit.models import AuditEvent
from core.paging import capped_count, count_label
from inbox.models import Job

# Columns a 390 px phone drops (the detail pages have them all).
NARROW_HIDDEN = {"th": {"class": "hide-narrow"}, "td": {"class": "hide-narrow"}}
# Characters of an audit event's detail shown in the log (the export has all of it).
DETAIL_PREVIEW = 160


class TimeColumn(tables.Column):
    """A timestamp in the current time zone as ``Y-m-d H:i:s``, rendered in Python.

    django-tables2's ``DateTimeColumn`` is a ``TemplateColumn``: it builds and renders a small
    template for every cell, which was a quarter of the jobs list's render time at 50 rows.
    """

    def __init__(self, *args, fmt: str = "Y-m-d H:i:s", **kwargs) -> None:
        self.fmt = fmt
        super().__init__(*args, **kwargs)

    def render(self, value: dt.datetime) -> str:
        if timezone.is_aware(value):
            value = timezone.localtime(value)
        return dateformat.format(value, self.fmt)


def label_page(table: tables.Table, qs: QuerySet) -> None:
    """Attach "rows 51–100 of 10,000+" to a table paged by LazyPaginator (which has no count).

    The total is a capped count (one bounded query), never a COUNT(*) of the whole table.
    """
    page = getattr(table, "page", None)
    table.total_label = count_label(capped_count(qs))
    table.rows_label = ""
    if page is not None and len(page.object_list):
        start = (page.number - 1) * table.paginator.per_page + 1
        table.rows_label = f"rows {start:,}–{start + len(page.object_list) - 1:,}"


# --- jobs -------------------------------------------------------------------------------------


class JobTable(tables.Table):
    select = tables.CheckBoxColumn(
        accessor="job_id",
        attrs={
            "input": {"name": "job_ids", "form": "bulk-form", "aria-label": "select job"},
            "th__input": {"data-select-all": "job-table", "aria-label": "select all rows"},
        },
        orderable=False,
    )
    job_id = tables.Column(verbose_name="Job", order_by=("job_id",))
    state = tables.Column(order_by=("state", "created_at", "job_id"))
    job_type = tables.Column(verbose_name="Type", orderable=False)
    object_id = tables.Column(verbose_name="Object", orderable=False, attrs=NARROW_HIDDEN)
    mission_id = tables.Column(verbose_name="Mission", orderable=False, attrs=NARROW_HIDDEN)
    worker_id = tables.Column(
        verbose_name="Worker", orderable=False, attrs=NARROW_HIDDEN, default="—"
    )
    attempt_count = tables.Column(verbose_name="Tries", orderable=False, attrs=NARROW_HIDDEN)
    lease = tables.Column(
        verbose_name="Lease", accessor="lease_until", orderable=False, attrs=NARROW_HIDDEN
    )
    on_expiry = tables.Column(
        verbose_name="On lease expiry", accessor="job_type", orderable=False, empty_values=()
    )
    created_at = TimeColumn(verbose_name="Created", order_by=("created_at", "job_id"))
    updated_at = TimeColumn(
        verbose_name="Updated",
        order_by=("updated_at", "job_id"),
        attrs=NARROW_HIDDEN,
    )

    class Meta:
        model = Job
        fields = ()
        sequence = (
            "select",
            "job_id",
            "state",
            "job_type",
            "object_id",
            "mission_id",
            "worker_id",
            "attempt_count",
            "lease",
            "on_expiry",
            "created_at",
            "updated_at",
        )
        order_by_field = "sort"
        template_name = "console/jobs-table.html"
        attrs = {"class": "jobs"}
        empty_text = "No job matches these filters."


# --- audit log --------------------------------------------------------------------------------


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


class AuditEventTable(tables.Table):
    event_id = tables.Column(verbose_name="#", orderable=False)
    created_at = TimeColumn(verbose_name="When", orderable=False)
    event_type = tables.Column(verbose_name="Type", orderable=False)
    actor = tables.Column(orderable=False)
    subject = tables.Column(accessor="event_id", orderable=False, empty_values=())
    result_code = tables.Column(verbose_name="Result", orderable=False, attrs=NARROW_HIDDEN)
    detail = tables.Column(orderable=False, empty_values=(), attrs=NARROW_HIDDEN)

    class Meta:
        model = AuditEvent
        fields = ()
        sequence = (
            "event_id",
            "created_at",
            "event_type",
            "actor",
            "subject",
            "result_code",
            "detail",
        )
        template_name = "console/audit-table.html"
        attrs = {"class": "audit"}
        empty_text = "No event matches these filters."
