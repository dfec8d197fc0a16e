"""Errors under ``/api/`` as JSON problems, whichever layer answered.

A problem is ``application/problem+json`` (RFC 9457) with the members ``title`` (the status's
name), ``status``, ``detail`` (what went wrong, in words a producer can act on) and ``errors``
(per refused document, else empty); ``docs/api.md`` documents it. The API's views answer with
``problem()``; ``console.middleware.error_response`` (404 of an unknown route, 400 of a NUL, 500,
503) answers with it for API paths; and ``ApiProblemsMiddleware``, outermost, turns anything
else an API path gets (ninja's 405, a debug page) into one, keeping headers such as ``Allow``.
The console's HTML pages are not touched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger("console.errors")

PROBLEM_TYPE = "application/problem+json"
API_PREFIX = "/api/"

# What an error the API's own views do not word says, by status.
DETAILS = {
    400: "The request was refused.",
    403: "Not allowed.",
    404: "There is nothing at this address: see /api/v1/docs for the routes.",
    405: "This method is not allowed here.",
    500: "The server failed on this request; nothing was stored.",
    503: "The database is busy; nothing was stored. Try again.",
}


def is_api(request: HttpRequest | None) -> bool:
    return request is not None and request.path_info.startswith(API_PREFIX)


def problem(status: int, detail: str, errors: list[dict[str, Any]] | None = None) -> JsonResponse:
    """The JSON problem for ``status``: ``detail`` and, for refused documents, ``errors``."""
    body = {
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "errors": errors or [],
    }
    return JsonResponse(body, status=status, content_type=PROBLEM_TYPE)


def _detail_of(response: HttpResponse) -> str:
    """A JSON body's own ``detail`` (ninja words some errors), else the status's."""
    if response.get("Content-Type", "").startswith("application/json"):
        try:
            detail = json.loads(response.content).get("detail")
        except (ValueError, AttributeError):
            detail = None
        if isinstance(detail, str) and detail:
            return detail
    return DETAILS.get(response.status_code, HTTPStatus(response.status_code).phrase + ".")


def as_problem(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """``response`` as a problem, with its headers (``Allow``, ``WWW-Authenticate``, …)."""
    detail = _detail_of(response)
    if response.status_code == 405 and response.get("Allow"):
        detail = f"{request.method} is not allowed here; allowed: {response['Allow']}."
    converted = problem(response.status_code, detail)
    for name, value in response.headers.items():
        if name.lower() not in ("content-type", "content-length"):
            converted[name] = value
    converted.cookies = response.cookies
    return converted


class ApiProblemsMiddleware:
    """Every error response under ``/api/`` is a JSON problem; see the module docstring."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code >= 400
            and is_api(request)
            and not response.get("Content-Type", "").startswith(PROBLEM_TYPE)
            and not getattr(response, "streaming", False)
        ):
            return as_problem(request, response)
        return response
