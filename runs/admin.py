"""Django admin for runs, groups and members: everything read-only, no add, no delete.

The only write is the "close selected runs" action, which calls ``runs.transitions.close_run``
with the admin user as actor (audit event RUN_ABANDONED).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest

from core.admin import ReadOnlyAdmin as ViewOnlyAdmin
from core.clock import db_now
from runs import transitions
from runs.errors import RunError
from runs.models import Group, Member, Run, RunStatus
from runs.selectors import run_view


class ReadOnlyAdmin(ViewOnlyAdmin):
    """Status, lease and disposition fields belong to ``runs.transitions``; nothing is editable."""

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        return [f.name for f in self.model._meta.fields]


@admin.action(description="Close selected active runs (abandoned)", permissions=["close"])
def close_selected_runs(modeladmin, request, queryset):
    actor = request.user.get_username()
    done, refused = 0, []
    for run_id in queryset.filter(status=RunStatus.ACTIVE).values_list("run_id", flat=True)[:100]:
        try:
            transitions.close_run(
                run_id,
                status=RunStatus.ABANDONED,
                actor=actor,
                reason=f"closed from Django admin by {actor}",
            )
            done += 1
        except RunError as exc:
            refused.append(str(exc))
    modeladmin.message_user(request, f"Closed {done} run(s).", messages.SUCCESS)
    for text in refused[:20]:
        modeladmin.message_user(request, text, messages.WARNING)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = (
        "run_id",
        "store",
        "worker_id",
        "status",
        "effective",
        "started_at",
        "expires_at",
        "closed_by",
    )
    list_filter = ("status", "store")
    search_fields = ("=run_id", "=store", "=worker_id")
    ordering = ("-started_at",)
    actions = [close_selected_runs]

    @admin.display(description="effective status")
    def effective(self, obj: Run) -> str:
        view = run_view(obj, db_now())
        return (
            f"{view.effective_status} ({view.seconds_left:.0f}s left)"
            if view.seconds_left
            else view.effective_status
        )

    def has_close_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("runs.close_run")

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.has_perm("runs.view_run") or request.user.has_perm("runs.close_run")


@admin.register(Group)
class GroupAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "seq", "key", "status", "served_at")
    list_filter = ("status",)
    search_fields = ("=run__run_id", "=key")
    list_select_related = ("run",)


@admin.register(Member)
class MemberAdmin(ReadOnlyAdmin):
    list_display = ("id", "group", "item_ref", "disposition", "disposed_at")
    list_filter = ("disposition",)
    search_fields = ("=group__run__run_id", "item_ref")
    list_select_related = ("group",)
