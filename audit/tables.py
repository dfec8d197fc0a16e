"""The audit log table: newest first by event_id, no COUNT(*), links to each event's subject."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import django_tables2 as tables
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from audit.models import AuditEvent
from console.tables import TimeColumn

DETAIL_PREVIEW = 160
# Columns a 390 px phone drops.
NARROW_HIDDEN = {"th": {"class": "hide-narrow"}, "td": {"class": "hide-narrow"}}


def subject_url(event: AuditEvent) -> str:
    """Where an event's subject lives in the console."""
    if event.job_id:
        return reverse("inbox:job_detail", args=[event.job_id])
    if event.run_id:
        # Runs are shown per store on the runs page.
        try:
            url = reverse("runs")
        except NoReverseMatch:
            url = "/runs/"
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
        template_name = "audit/event_table.html"
        attrs = {"class": "audit"}
        empty_text = "No event matches these filters."

    def render_event_type(self, record: AuditEvent) -> str:
        return format_html("<strong>{}</strong>", record.event_type)

    def render_subject(self, record: AuditEvent) -> str:
        url = subject_url(record)
        if not url:
            return "—"
        kind, ident = ("job", record.job_id) if record.job_id else ("run", record.run_id)
        return format_html('{} <a class="mono" href="{}" hx-boost="false">{}</a>', kind, url, ident)

    def render_detail(self, record: AuditEvent) -> str:
        return format_html('<span class="mono">{}</span>', detail_text(record.detail))
