"""Every console route, in the ``console`` namespace. Each view wears a ``console.policy``
decorator (the route-matrix test, tests/console/test_routes.py, fails otherwise).

Paths are bookmarked by operators: keep them. Job and run ids are producer-chosen and may
contain anything, "/" included, so an id is always the *last* part of a route (``<anyid:…>``,
``console.converters``: any character, newlines too; no suffix after it) and no two routes
can match one URL (tests/console/test_route_ids.py):

- ``jobs/<anyid:job_id>/`` (a job's page) is the only route under ``jobs/`` with an id; a job's
  fragments and actions live outside ``jobs/`` (``job-lease/<id>``, ``job-retry/<id>``,
  ``job-cancel/<id>``), and the
  fixed bulk routes end without a slash, so no job id's page can be shadowed, whatever the id
  starts or ends with;
- elsewhere the verb comes first and the id last (``reconcile/annotate/<id>``,
  ``approvals/approve/<id>``, ``runs/close/<id>``).
"""

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, path

import console.converters  # noqa: F401  (registers the ``anyid`` converter before any route)
from console import (
    api,
    approvals,
    audit,
    dashboard,
    health,
    jobs,
    metrics,
    reconcile,
    runs,
    workers,
)
from console.policy import public

app_name = "console"

urlpatterns: list[URLPattern | URLResolver] = [
    path("", dashboard.dashboard, name="home"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path(
        "login/",
        public(auth_views.LoginView.as_view(template_name="console/login.html")),
        name="login",
    ),
    path("logout/", public(auth_views.LogoutView.as_view()), name="logout"),
    # Jobs.
    path("jobs/", jobs.job_list, name="job_list"),
    path("jobs/bulk/preview", jobs.bulk_preview, name="bulk_preview"),
    path("jobs/bulk/retry", jobs.bulk_retry, name="bulk_retry"),
    path("jobs/bulk/reconcile", jobs.bulk_reconcile, name="bulk_reconcile"),
    path("jobs/bulk/cancel", jobs.bulk_cancel, name="bulk_cancel"),
    path("jobs/<anyid:job_id>/", jobs.job_detail, name="job_detail"),
    path("job-lease/<anyid:job_id>", jobs.job_lease, name="job_lease"),
    path("job-retry/<anyid:job_id>", jobs.job_retry, name="job_retry"),
    path("job-cancel/<anyid:job_id>", jobs.job_cancel, name="job_cancel"),
    # Audit log.
    path("audit/", audit.event_list, name="event_list"),
    path("audit/export.csv", audit.event_export, name="event_export"),
    # Reconcile.
    path("reconcile/", reconcile.reconcile, name="reconcile"),
    path("reconcile/auto", reconcile.reconcile_auto, name="reconcile_auto"),
    path(
        "reconcile/confirm-deleted/<anyid:job_id>",
        reconcile.reconcile_confirm_deleted,
        name="reconcile_confirm_deleted",
    ),
    path(
        "reconcile/not-applied/<anyid:job_id>",
        reconcile.reconcile_not_applied,
        name="reconcile_not_applied",
    ),
    path(
        "reconcile/annotate/<anyid:job_id>", reconcile.reconcile_annotate, name="reconcile_annotate"
    ),
    path("reconcile/decide/<anyid:job_id>", reconcile.reconcile_decide, name="reconcile_decide"),
    # Approvals.
    path("approvals/", approvals.approvals, name="approvals"),
    path("approvals/bulk/preview", approvals.approvals_bulk_preview, name="approvals_bulk_preview"),
    path("approvals/bulk/decide", approvals.approvals_bulk, name="approvals_bulk"),
    path("approvals/approve/<anyid:job_id>", approvals.approve_delete, name="approve_delete"),
    path("approvals/deny/<anyid:job_id>", approvals.deny_delete, name="deny_delete"),
    # Runs.
    path("runs/", runs.runs, name="runs"),
    path("runs/close/<anyid:run_id>", runs.close_run, name="close_run"),
    # Workers and scopes.
    path("workers/", workers.workers, name="workers"),
    path("workers/scopes/<str:scope>/pause", workers.pause_scope, name="pause_scope"),
    path("workers/scopes/<str:scope>/resume", workers.resume_scope, name="resume_scope"),
    # Ecosystem: Prometheus scrape and the producer API.
    path("metrics", metrics.metrics, name="metrics"),
    path("api/v1/", api.urls()),
]
