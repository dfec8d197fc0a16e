"""The console's FilterSets: the jobs list and the audit log.

Every filter is an exact match on an indexed column, a prefix or time range on one, or (the
payload, PostgreSQL only) a JSONB containment, so a filtered page stays fast at millions of
rows.
"""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q, QuerySet

from audit.models import AuditEvent, AuditEventQuerySet, EventType
from core.clock import db_now
from inbox.jobtypes import registry, scopes
from inbox.models import Job, JobState
from inbox.selectors import (
    PayloadFilterError,
    filter_payload,
    orphaned_jobs,
    parse_payload_filter,
    payload_supported,
    search_matches,
    with_ids,
)


def _created(lookup: str, label: str) -> django_filters.DateTimeFilter:
    """One bound of a creation-time range, picked with the browser's date-time input."""
    return django_filters.DateTimeFilter(
        field_name="created_at",
        lookup_expr=lookup,
        label=label,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


# --- jobs -------------------------------------------------------------------------------------


def _type_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(registry())]


def _scope_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in scopes()]


class JobFilterForm(forms.Form):
    """Refuses a payload filter it cannot apply, with words an operator can act on."""

    def clean_payload(self) -> str:
        text = (self.cleaned_data.get("payload") or "").strip()
        if not text:
            return ""
        if not payload_supported(Job.objects.all()):
            raise forms.ValidationError(
                "The payload filter needs PostgreSQL (JSONB containment); this console runs "
                "on SQLite."
            )
        try:
            parse_payload_filter(text)
        except PayloadFilterError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return text


class JobFilter(django_filters.FilterSet):
    # The last search's matches (``inbox.selectors.SearchMatches``), None when not searching.
    search = None

    q = django_filters.CharFilter(
        method="filter_search",
        label="Search",
        widget=forms.TextInput(
            attrs={
                "type": "search",
                "data-search": "",
                "placeholder": "job id, object id, idempotency key or mission (starts with)",
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
        choices=[
            ("lapsed", "lapsed, awaiting sweep"),
            ("held", "held"),
            ("orphaned", "orphaned (holder dead, lease running)"),
        ],
        empty_label="any lease",
    )
    worker = django_filters.CharFilter(method="filter_worker", label="Worker")
    mission = django_filters.CharFilter(field_name="mission_id", label="Mission")
    created_after = _created("gte", "Created from")
    created_before = _created("lt", "Created before")

    payload = django_filters.CharFilter(
        method="filter_payload",
        label="Payload key=value",
        widget=forms.TextInput(attrs={"placeholder": "source_commit=a1b2c3 (exact)"}),
    )

    class Meta:
        model = Job
        fields: list[str] = []
        form = JobFilterForm

    def filter_worker(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        # ``worker_id <> ''`` (always true for a named worker) is the partial worker index's
        # condition, spelled as it is: SQLite then reads that index (PostgreSQL proves it
        # from the equality alone; inbox 0011).
        return queryset.filter(worker_id=value).filter(~Q(worker_id=""))

    def filter_lease(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        # Each reads the partial lease index (held states only) in lease order (the jobs list
        # pages them by lease), so a page costs 50 index entries, not a sort of every held job.
        if value == "lapsed":
            return queryset.lapsed(db_now()).order_by("lease_until", "job_id")
        if value == "held":
            return queryset.held().order_by("lease_until", "job_id")
        if value == "orphaned":
            return orphaned_jobs(queryset, db_now())
        return queryset

    def filter_payload(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return filter_payload(queryset, value) if value else queryset

    def filter_search(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        if not value.strip():
            return queryset
        # Kept on the filter set: the page says when a short prefix matched too many jobs.
        self.search = search_matches(value, using=queryset.db)
        return with_ids(queryset, self.search.ids)


# --- audit log --------------------------------------------------------------------------------


class AuditEventFilter(django_filters.FilterSet):
    type = django_filters.ChoiceFilter(
        field_name="event_type",
        choices=EventType.choices,
        empty_label="any type",
        label="Type",
        method="filter_type",
    )
    actor = django_filters.CharFilter(
        field_name="actor",
        label="Actor",
        widget=forms.TextInput(attrs={"type": "search", "data-search": "", "placeholder": "exact"}),
    )
    job = django_filters.CharFilter(field_name="job_id", label="Job")
    run = django_filters.CharFilter(field_name="run_id", label="Run")
    after = _created("gte", "From")
    before = _created("lt", "Before")

    class Meta:
        model = AuditEvent
        fields: list[str] = []

    def filter_type(
        self, queryset: AuditEventQuerySet, name: str, value: str
    ) -> AuditEventQuerySet:
        # The type index holds the rare types only; ``of_type`` words the query so it is used.
        return queryset.of_type(value) if value else queryset
