"""Job pages and job actions of the operator console (mounted at the site root)."""

from django.urls import path

from inbox import views

app_name = "inbox"

urlpatterns = [
    path("jobs/", views.job_list, name="job_list"),
    path("jobs/bulk/preview/", views.bulk_preview, name="bulk_preview"),
    path("jobs/bulk/retry/", views.bulk_retry, name="bulk_retry"),
    path("jobs/bulk/reconcile/", views.bulk_reconcile, name="bulk_reconcile"),
    # Job ids are producer-chosen and may contain "/": the action suffixes come first.
    path("jobs/<path:job_id>/lease/", views.job_lease, name="job_lease"),
    path("jobs/<path:job_id>/retry/", views.job_retry, name="job_retry"),
    path("jobs/<path:job_id>/", views.job_detail, name="job_detail"),
]
