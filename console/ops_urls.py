"""Routes for the reconcile, approvals, runs and workers pages (filled in by their owner).

Included from ``console.urls``; every view here must carry a ``console.policy`` decorator
(the route-matrix test fails otherwise).
"""

from django.urls import URLPattern, URLResolver

urlpatterns: list[URLPattern | URLResolver] = []
