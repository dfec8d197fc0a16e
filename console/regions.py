"""The answer to an action on one row of a page (a reconcile case, an approval): that row's
region re-rendered, and, when the action changed something, the event the page's other regions
(a count, a preview) reload on. Any console view that acts on one row may use it."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.http import trigger_client_event

from console.policy import ActionContext


def row_response(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    *,
    act: ActionContext,
    changed_event: str,
) -> HttpResponse:
    """Render ``template`` (a row's partial) with ``context`` and the action.
    ``changed_event`` is sent only if the action changed something: the other regions are
    stale then, and only then."""
    response = render(request, template, {**context, "act": act})
    if act.results:
        trigger_client_event(response, changed_event)
    return response
