"""URL routes: the Django admin, and every operator page in the ``console`` namespace."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("console.urls")),
]

# Styled error pages (templates/errors/), also for errors raised outside a view; see
# console/middleware.py, which renders the same pages for a view's exceptions in DEBUG too.
handler400 = "console.middleware.bad_request"
handler403 = "console.middleware.permission_denied"
handler404 = "console.middleware.page_not_found"
handler500 = "console.middleware.server_error"
