"""Routes for the reconcile, approvals, runs and workers pages (``console.ops_views``).

Included from ``console.urls``; every view here carries a ``console.policy`` decorator (the
route-matrix test fails otherwise). Job ids and run ids may hold any characters a producer
chose, so they travel as ``path`` segments before a fixed action suffix.
"""

from django.urls import URLPattern, URLResolver, path

from console import ops_views as v

urlpatterns: list[URLPattern | URLResolver] = [
    path("reconcile/", v.reconcile, name="reconcile"),
    path("reconcile/auto", v.reconcile_auto, name="reconcile_auto"),
    path(
        "reconcile/<path:job_id>/confirm-deleted",
        v.reconcile_confirm_deleted,
        name="reconcile_confirm_deleted",
    ),
    path(
        "reconcile/<path:job_id>/not-applied",
        v.reconcile_not_applied,
        name="reconcile_not_applied",
    ),
    path("reconcile/<path:job_id>/annotate", v.reconcile_annotate, name="reconcile_annotate"),
    path("approvals/", v.approvals, name="approvals"),
    path("approvals/<path:job_id>/approve", v.approve_delete, name="approve_delete"),
    path("approvals/<path:job_id>/deny", v.deny_delete, name="deny_delete"),
    path("runs/", v.runs, name="runs"),
    path("runs/<path:run_id>/close", v.close_run, name="close_run"),
    path("workers/", v.workers, name="workers"),
    path("workers/scopes/<str:scope>/pause", v.pause_scope, name="pause_scope"),
    path("workers/scopes/<str:scope>/resume", v.resume_scope, name="resume_scope"),
]
