"""The audit log's filters: exact matches on the indexed columns, plus a time range."""

from __future__ import annotations

import django_filters
from django import forms

from audit.models import AuditEvent, EventType


class AuditEventFilter(django_filters.FilterSet):
    type = django_filters.ChoiceFilter(
        field_name="event_type", choices=EventType.choices, empty_label="any type", label="Type"
    )
    actor = django_filters.CharFilter(
        field_name="actor",
        label="Actor",
        widget=forms.TextInput(attrs={"type": "search", "data-search": "", "placeholder": "exact"}),
    )
    job = django_filters.CharFilter(field_name="job_id", label="Job")
    run = django_filters.CharFilter(field_name="run_id", label="Run")
    after = django_filters.DateTimeFilter(
        field_name="created_at",
        lookup_expr="gte",
        label="From",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    before = django_filters.DateTimeFilter(
        field_name="created_at",
        lookup_expr="lt",
        label="Before",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    class Meta:
        model = AuditEvent
        fields: list[str] = []
