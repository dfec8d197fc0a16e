"""The audit log pages of the operator console (mounted at the site root)."""

from django.urls import URLPattern, URLResolver

app_name = "audit"

urlpatterns: list[URLPattern | URLResolver] = []
