"""The answer to a live region's poll, shared by the pages whose rows poll (jobs, audit).

A poll sends the version it shows (``v``); while the rows would render the same the answer is
204 with no rendering, otherwise the region alone. A history restore is never a poll: it wants
the whole page.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def poll_answer(
    request: HttpRequest, *, region: str, template: str, token: str, context: dict[str, Any]
) -> HttpResponse | None:
    """204 or the ``region`` of ``template`` when this request polls it; None otherwise."""
    target = request.htmx.target if request.htmx else None
    if target != region or request.htmx.history_restore_request:
        return None
    if request.GET.get("v") == token:
        return HttpResponse(status=204)
    return render(request, f"{template}#{region}", context)
