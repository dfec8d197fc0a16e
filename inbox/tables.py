"""The job list table: sortable only on indexed columns, paginated without COUNT(*)."""

from __future__ import annotations

import django_tables2 as tables
from django.urls import reverse
from django.utils.html import format_html

from console.tables import TimeColumn
from inbox.models import Job
from inbox.selectors import expiry_behaviour

# Columns a 390 px phone drops (the detail page has them all).
NARROW_HIDDEN = {"th": {"class": "hide-narrow"}, "td": {"class": "hide-narrow"}}


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
        template_name = "inbox/job_table.html"
        attrs = {"class": "jobs"}
        empty_text = "No job matches these filters."

    def render_job_id(self, value: str) -> str:
        url = reverse("inbox:job_detail", args=[value])
        return format_html('<a class="mono" href="{}" hx-boost="false">{}</a>', url, value)

    def render_state(self, record: Job) -> str:
        return format_html('<span class="state state-{}">{}</span>', record.state, record.state)

    def render_on_expiry(self, value: str) -> str:
        text = expiry_behaviour(value)
        css = "muted" if text == "retried" else "warn"
        return format_html('<span class="{}">{}</span>', css, text)
