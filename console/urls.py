"""Every console route. Each view carries a ``console.policy`` decorator (see test_routes)."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from console import views
from console.policy import public

urlpatterns = [
    path("", views.dashboard, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("login/", public(auth_views.LoginView.as_view()), name="login"),
    path("logout/", public(auth_views.LogoutView.as_view()), name="logout"),
    path("", include("inbox.urls")),
    path("", include("audit.urls")),
    # Reconcile, approvals, runs and workers pages live in their own module.
    path("", include("console.ops_urls")),
]
