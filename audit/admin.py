"""Audit events in admin: view only, for superusers too."""

from django.contrib import admin

from audit.models import AuditEvent, EventType
from core.admin import ReadOnlyAdmin
from core.paging import EstimatedCountPaginator


class EventTypeFilter(admin.SimpleListFilter):
    """The type filter, through ``AuditEventQuerySet.of_type``: the type index holds only the
    rare types, and SQLite uses it only when the query states its condition."""

    title = "event type"
    parameter_name = "event_type"

    def lookups(self, request, model_admin):  # type: ignore[no-untyped-def]
        return EventType.choices

    def queryset(self, request, queryset):  # type: ignore[no-untyped-def]
        value = self.value()
        return queryset.of_type(value) if value else queryset


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("event_id", "created_at", "event_type", "job_id", "run_id", "actor")
    list_filter = (EventTypeFilter,)
    search_fields = ("=job_id", "=run_id", "=actor")
    show_full_result_count = False
    # Facet counts ("Show counts") are a full-table COUNT per filter value on every page.
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    list_per_page = 50
