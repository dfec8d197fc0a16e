"""The console's FilterSets: the jobs list and the audit log.

Every filter is an exact match on an indexed column (or a time range on one), so a filtered
page stays fast at millions of rows.
"""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import QuerySet

from audit.models import AuditEvent, EventType
from core.clock import db_now
from inbox.jobtypes import registry, scopes
from inbox.models import Job, JobState
from inbox.selectors import search_jobs

# --- jobs -------------------------------------------------------------------------------------


def _type_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(registry())]


def _scope_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in scopes()]


class JobFilter(django_filters.FilterSet):
    q = django_filters.CharFilter(
        method="filter_search",
        label="Search",
        widget=forms.TextInput(
            attrs={
                "type": "search",
                "data-search": "",
                "placeholder": "job id, object id, idempotency key or mission (exact)",
                "aria-keyshortcuts": "/",
            }
        ),
    )
    state = django_filters.ChoiceFilter(choices=JobState.choices, empty_label="any state")
    job_type = django_filters.ChoiceFilter(
        label="Type", choices=_type_choices, empty_label="any type"
    )
    scope = django_filters.ChoiceFilter(choices=_scope_choices, empty_label="any scope")
    lease = django_filters.ChoiceFilter(
        method="filter_lease",
        label="Lease",
        choices=[("lapsed", "lapsed, awaiting sweep"), ("held", "held")],
        empty_label="any lease",
    )
    worker = django_filters.CharFilter(field_name="worker_id", label="Worker")
    mission = django_filters.CharFilter(field_name="mission_id", label="Mission")
    created_after = django_filters.DateTimeFilter(
        field_name="created_at",
        lookup_expr="gte",
        label="Created from",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    created_before = django_filters.DateTimeFilter(
        field_name="created_at",
        lookup_expr="lt",
        label="Created before",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    class Meta:
        model = Job
        fields: list[str] = []

    def filter_lease(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        # Both read the partial lease index (held states only) in lease order, so a page of
        # them costs 50 index entries, not a sort of every held job.
        if value == "lapsed":
            return queryset.lapsed(db_now()).order_by("lease_until", "job_id")
        if value == "held":
            return queryset.held().order_by("lease_until", "job_id")
        return queryset

    def filter_search(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return search_jobs(queryset, value)


# --- audit log --------------------------------------------------------------------------------


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
