"""Job pages and job actions of the operator console (mounted at the site root)."""

from django.urls import URLPattern, URLResolver

app_name = "inbox"

urlpatterns: list[URLPattern | URLResolver] = []
