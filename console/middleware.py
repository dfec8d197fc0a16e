"""Request guards and error pages that no view should have to remember.

- ``RefuseNulMiddleware``: a NUL byte anywhere in the path, the query string, a form field or a
  cookie is refused with a styled 400 before any view, session or database sees it (PostgreSQL
  refuses NUL in text and would answer 500; SQLite would store it).
- ``ErrorPagesMiddleware``: a view's exception becomes a styled page in DEBUG and production
  alike — ``Http404`` → 404, ``PermissionDenied`` → 403, ``BadRequest`` /
  ``SuspiciousOperation`` → 400, and a database that stayed busy past its timeout (SQLite's
  "database is locked", PostgreSQL's lock or statement timeout) → 503 "database busy, try
  again" with ``Retry-After``, never a 500. Anything else is left to Django (the debug page in
  DEBUG, ``handler500`` in production).

``error_response`` renders every error page (a JSON problem under ``/api/``), and the
``handler*`` views in ``config.urls`` use it, so a page looks the same whichever way it was
reached. 500, 503 and refused requests render
without the request's context: they must not need the database (or the session) that failed.

"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.db import OperationalError
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.http.multipartparser import MultiPartParserError
from django.template import loader
from django.views.decorators.csrf import requires_csrf_token

from console.problems import DETAILS, is_api, problem

log = logging.getLogger("console.errors")

# Seconds a client is told to wait before retrying a busy database.
BUSY_RETRY_AFTER = 5
# PostgreSQL: lock_not_available (lock_timeout) and query_canceled (statement_timeout).
BUSY_SQLSTATES = frozenset({"55P03", "57014"})
NUL = "\x00"

HEADINGS = {
    400: "The request was refused.",
    403: "Not allowed.",
    404: "Not found.",
    500: "The console failed on this request.",
    503: "Database busy, try again.",
}


def _is_htmx(request: HttpRequest) -> bool:
    # Read the header: this can run before django_htmx's middleware has set request.htmx.
    return request.headers.get("HX-Request") == "true"


def error_response(
    request: HttpRequest | None,
    status: int,
    *,
    message: str = "",
    context: dict[str, Any] | None = None,
    with_request: bool = True,
) -> HttpResponse:
    """The styled page (or, inside an htmx region, a one-line fragment) for ``status``.

    htmx swaps 400, 403 and 409 bodies into the region that asked (see base.html), so those get
    the fragment; other statuses are not swapped and get the page. Under ``/api/`` it is a JSON
    problem instead (``console.problems``).
    """
    if is_api(request):
        return problem(status, message or DETAILS.get(status, HEADINGS.get(status, "")))
    if request is not None and _is_htmx(request) and status in (400, 403, 409):
        body = loader.render_to_string(
            "errors/fragment.html", {"heading": HEADINGS.get(status, ""), "message": message}
        )
    else:
        page_context = {"reason": message, **(context or {})}
        body = loader.render_to_string(
            f"errors/{status}.html", page_context, request=request if with_request else None
        )
    return HttpResponse(body, status=status)


def is_busy(exc: BaseException) -> bool:
    """Did the database give up waiting for a lock (as opposed to failing)?"""
    if not isinstance(exc, OperationalError):
        return False
    if "database is locked" in str(exc) or "database table is locked" in str(exc):
        return True
    return getattr(exc.__cause__, "sqlstate", None) in BUSY_SQLSTATES


def busy_response(request: HttpRequest | None) -> HttpResponse:
    response = error_response(
        request, 503, context={"retry_after": BUSY_RETRY_AFTER}, with_request=False
    )
    response["Retry-After"] = str(BUSY_RETRY_AFTER)
    return response


def _has_nul(request: HttpRequest) -> str:
    """Where a NUL byte is, or ""."""
    if NUL in request.path_info or NUL in request.path:
        return "the address"
    for where, data in (("the query string", lambda: request.GET), ("the form", _form(request))):
        for key, values in data().lists():
            if NUL in key or any(NUL in value for value in values):
                return where
    if any(NUL in key or NUL in value for key, value in request.COOKIES.items()):
        return "a cookie"
    return ""


def _form(request: HttpRequest) -> Callable[[], Any]:
    def read() -> Any:
        try:
            return request.POST
        except (MultiPartParserError, SuspiciousOperation):
            # Django answers these itself (400) when the view reads the form; nothing to scan.
            return QueryDict()

    return read


class RefuseNulMiddleware:
    """Refuse a request with a NUL byte anywhere before it reaches a view or the database."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        where = _has_nul(request)
        if where:
            log.warning("refused a request with a NUL byte in %s", where)
            return error_response(
                request,
                400,
                message=f"It contains a NUL byte in {where}; remove it and try again.",
                with_request=False,
            )
        return self.get_response(request)


class ErrorPagesMiddleware:
    """Styled pages for a view's 400, 403, 404 and busy-database 503; see the module docstring."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, Http404):
            return error_response(request, 404, context=_not_found_context(request, exc))
        if isinstance(exc, PermissionDenied):
            return error_response(request, 403)
        if isinstance(exc, (BadRequest, SuspiciousOperation)):
            return error_response(request, 400)
        if is_busy(exc):
            log.warning("database busy on %s %s: %s", request.method, request.path, exc)
            return busy_response(request)
        return None


def _not_found_context(request: HttpRequest, exc: BaseException) -> dict[str, Any]:
    message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else ""
    return {"request_path": request.path, "exception": message}


# --- handlers for config.urls (production, and anything raised outside a view) ---------------


@requires_csrf_token
def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_response(request, 400)


@requires_csrf_token
def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_response(request, 403)


@requires_csrf_token
def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_response(request, 404, context=_not_found_context(request, exception))


@requires_csrf_token
def server_error(request: HttpRequest) -> HttpResponse:
    """500 — or 503 when the database stayed busy (raised where no view could catch it, e.g. a
    session saved after the view). Rendered without the request: the database may be the
    problem."""
    exc = sys.exc_info()[1]
    if exc is not None and is_busy(exc):
        return busy_response(request)
    return error_response(request, 500, with_request=False)
