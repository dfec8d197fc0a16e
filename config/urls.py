"""URL routes: the Django admin, and every operator page in the ``console`` namespace."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("console.urls")),
]
