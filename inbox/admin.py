"""Django admin for jobs: raw edits of the few editable fields, state changes only via actions
that call ``inbox.transitions`` with the admin user as actor."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.http import HttpRequest

from core.admin import ReadOnlyAdmin
from core.paging import EstimatedCountPaginator
from inbox import transitions
from inbox.jobtypes import registry
from inbox.models import Approval, Job, JobState, ScopePause, Worker


def _report(modeladmin, request: HttpRequest, label: str, moved: transitions.Moved) -> None:
    modeladmin.message_user(request, f"{label}: {len(moved)} job(s).", messages.SUCCESS)
    for exc in list(moved.refused.values())[:20]:
        modeladmin.message_user(request, str(exc), messages.WARNING)


def _selected(queryset, state: str) -> list[str]:
    return list(queryset.filter(state=state).values_list("job_id", flat=True)[:1000])


def _bulk(name: str, write: Callable[..., transitions.Moved], state: str, verb: str, label: str):
    """The admin action ``name``: it moves the selected jobs in ``state`` through the writer,
    with the admin user as actor and "admin action: <verb>" as reason, and reports the result."""

    def act(modeladmin, request, queryset) -> None:
        actor = request.user.get_username()
        moved = write(_selected(queryset, state), actor=actor, reason=f"admin action: {verb}")
        _report(modeladmin, request, label, moved)

    act.__name__ = act.__qualname__ = name  # the action's name in the changelist's form
    return act


retry_failed = admin.action(description="Retry selected FAILED jobs", permissions=["retry"])(
    _bulk("retry_failed", transitions.retry_jobs, JobState.FAILED, "retry", "Retried")
)
reject_created = admin.action(description="Reject selected CREATED jobs", permissions=["change"])(
    _bulk("reject_created", transitions.reject_jobs, JobState.CREATED, "reject", "Rejected")
)


class JobTypeFilter(admin.SimpleListFilter):
    """Job types from the registry: the default filter runs SELECT DISTINCT over every job."""

    title = "job type"
    parameter_name = "job_type"

    def lookups(self, request, model_admin):
        return [(name, name) for name in sorted(registry())]

    def queryset(self, request, queryset):
        return queryset.filter(job_type=self.value()) if self.value() else queryset


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "job_id",
        "job_type",
        "state",
        "object_id",
        "worker_id",
        "lease_until",
        "attempt_count",
        "result_code",
        "created_at",
    )
    list_filter = ("state", JobTypeFilter)
    search_fields = ("=job_id", "=object_id", "=idempotency_key", "=mission_id")
    ordering = ("-created_at", "job_id")
    show_full_result_count = False
    # Facet counts ("Show counts") are a full-table COUNT per filter value on every page.
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    list_per_page = 50
    actions = [retry_failed, reject_created]
    fields = (
        "job_id",
        "job_version",
        "job_type",
        "scope",
        "mission_id",
        "object_id",
        "vault_path",
        "approval_id",
        "idempotency_key",
        "requested_by",
        "state",
        "worker_id",
        "claim_id",
        "claimed_at",
        "lease_until",
        "attempt_count",
        "max_attempts",
        "result_code",
        "last_error",
        "supersedes",
        "fingerprint",
        "payload",
        "note",
        "created_at",
        "updated_at",
    )

    def get_readonly_fields(self, request, obj=None):
        return [f for f in self.fields if f not in transitions.EDITABLE_FIELDS]

    def has_add_permission(self, request) -> bool:
        return False  # jobs come from producers through create_job / enqueue

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_retry_permission(self, request) -> bool:
        return request.user.has_perm("inbox.retry_job")

    def save_model(self, request, obj, form, change) -> None:
        changes = {name: form.cleaned_data[name] for name in form.changed_data}
        if changes:
            transitions.edit_job_fields(
                obj.job_id, actor=request.user.get_username(), changes=changes
            )


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ("approval_id", "job_id", "decision", "approver", "decided_at", "expires_at")
    list_filter = ("decision",)
    search_fields = ("=approval_id", "=job_id")


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ("worker_id", "kind", "scope", "host", "pid", "status", "last_seen_at")
    list_filter = ("kind", "status")


@admin.register(ScopePause)
class ScopePauseAdmin(ReadOnlyAdmin):
    list_display = ("scope", "paused", "changed_by", "changed_at", "reason")
