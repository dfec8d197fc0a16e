"""Audit events in admin: view only, for superusers too."""

from django.contrib import admin

from audit.models import AuditEvent
from core.paging import EstimatedCountPaginator


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("event_id", "created_at", "event_type", "job_id", "run_id", "actor")
    list_filter = ("event_type",)
    search_fields = ("=job_id", "=run_id", "=actor")
    show_full_result_count = False
    # Facet counts ("Show counts") are a full-table COUNT per filter value on every page.
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    list_per_page = 50

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
