"""Health checks for load balancers and orchestrators: public, JSON, no template."""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from console.policy import public


@public
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers; no database access."""
    return JsonResponse({"status": "ok"})


@public
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: the database answers and every migration is applied."""
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        return JsonResponse({"status": "unavailable", "error": str(exc)}, status=503)
    if pending:
        return JsonResponse(
            {"status": "migrations pending", "pending": [str(m) for m, _ in pending]}, status=503
        )
    return JsonResponse({"status": "ready"})
