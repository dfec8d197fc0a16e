"""The audit log pages of the operator console (mounted at the site root)."""

from django.urls import path

from audit import views

app_name = "audit"

urlpatterns = [
    path("audit/", views.event_list, name="event_list"),
    path("audit/export.csv", views.event_export, name="event_export"),
]
