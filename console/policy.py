"""Declared access policy for every console route: pages, actions and public endpoints.

Every view reachable from ``console.urls`` wears exactly one of these decorators; each stamps the
view with ``view.console_policy`` so the route-matrix test can check that no route is left
undeclared and that every action refuses anonymous users, missing permissions, missing CSRF and
the wrong method while writing nothing.

- ``@page(permission=None)``: GET/HEAD only, login required, optional view permission.
- ``@action(permission=..., region=..., needs_reason=False)``: POST only, login, the named
  permission, a ``request_id`` (a repeat by the same user does not act again; another
  user's same id is a request of their own) and, when asked, a non-empty
  ``reason``. The view runs inside one transaction together with its ``ActionRequest`` row and
  receives an ``ActionContext`` as ``act``; it calls its service through ``act.perform`` and
  always renders its region (using ``act.message`` / ``act.status``).
- ``@public``: no login (health checks, the login page itself).
- ``api_route``: a producer API route (``console.api``): a bearer token from
  ``manage.py create_token`` or a logged-in session; no token, no session: 401. django-ninja
  marks its views CSRF-exempt; ``console.api`` checks CSRF itself for sessions (a bearer token
  is never sent by a browser on its own, so it needs none).
- ``metrics_route``: ``/metrics`` for Prometheus: ``Authorization: Bearer
  <METRICS_TOKEN>`` when that setting is made, else loopback clients only.

CSRF is Django's middleware; nothing here exempts a view from it (the API's ninja views are
exempt from the middleware and run the same check themselves, see above).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from audit.events import REASON_MAX
from console.models import ActionRequest
from core.errors import DomainError

log = logging.getLogger(__name__)

View = TypeVar("View", bound=Callable[..., HttpResponse])

# A request id is what the form rendered (uuid4 hex or dashed); anything else is refused.
REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


@dataclass(frozen=True)
class Policy:
    """What a route demands; read by the route-matrix test."""

    kind: Literal["page", "action", "public", "api", "metrics"]
    permission: str | None = None
    region: str | None = None
    needs_reason: bool = False
    name: str = ""

    @property
    def methods(self) -> tuple[str, ...]:
        return ("POST",) if self.kind == "action" else ("GET", "HEAD")


def _login_response(request: HttpRequest) -> HttpResponse:
    """Anonymous: a normal redirect, or HX-Redirect so htmx reloads the whole page."""
    login_url = resolve_url(settings.LOGIN_URL)
    if getattr(request, "htmx", False):
        # Come back to the page the user was on, not to the fragment URL.
        current = request.htmx.current_url_abs_path or reverse("console:home")
        response = redirect_to_login(current, login_url)
        return HttpResponseClientRedirect(response["Location"])
    return redirect_to_login(request.get_full_path(), login_url)


def forbidden(request: HttpRequest, *, permission: str, region: str | None) -> HttpResponse:
    """403 rendered into the region for HTMX, or as a small full page otherwise."""
    context = {"permission": permission, "region": region or "main-region"}
    template = "components/forbidden.html" if request.htmx else "components/forbidden_page.html"
    return render(request, template, context, status=403)


def _stamp(view: Callable[..., HttpResponse], policy: Policy) -> None:
    view.console_policy = policy  # type: ignore[attr-defined]


def public[V: Callable[..., HttpResponse]](view: V) -> V:
    """Mark a view as reachable without login (health checks, login/logout)."""
    _stamp(view, Policy(kind="public", name=getattr(view, "__name__", "view")))
    return view


def api_route[V: Callable[..., HttpResponse]](view: V, *, name: str = "") -> V:
    """Mark a producer API view (token or session; see the module docstring)."""
    _stamp(view, Policy(kind="api", name=name or getattr(view, "__name__", "api")))
    return view


def metrics_route[V: Callable[..., HttpResponse]](view: V) -> V:
    """Mark the Prometheus endpoint (METRICS_TOKEN bearer, or loopback only)."""
    _stamp(view, Policy(kind="metrics", name=getattr(view, "__name__", "metrics")))
    return view


def page(permission: str | None = None) -> Callable[[View], View]:
    """A read-only page or fragment: GET/HEAD, login, and optionally a view permission."""

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in ("GET", "HEAD"):
                return HttpResponseNotAllowed(["GET", "HEAD"])
            if not request.user.is_authenticated:
                return _login_response(request)
            if permission and not request.user.has_perm(permission):
                # A poller's 403 replaces the poller itself (its id is the HX-Target).
                region = request.htmx.target if request.htmx else None
                return forbidden(request, permission=permission, region=region)
            return view(request, *args, **kwargs)

        _stamp(wrapper, Policy(kind="page", permission=permission, name=view.__name__))
        return wrapper  # type: ignore[return-value]

    return decorate


@dataclass
class ActionContext:
    """One action request as the view sees it."""

    name: str
    region: str
    request_id: str
    reason: str
    user: Any
    replayed: bool = False
    # A validation problem (missing reason or request id): the view re-renders with it, 400.
    error: str = ""
    message: str = ""
    status: int = 200
    outcome: str = ""
    results: list[Any] = field(default_factory=list)

    @property
    def actor(self) -> str:
        return self.user.get_username()

    @property
    def should_act(self) -> bool:
        return not self.replayed and not self.error

    def perform(self, fn: Callable[[], Any], *, done: str) -> Any:
        """Run the service call once; a domain refusal becomes a 409 message, nothing written."""
        if not self.should_act:
            return None
        try:
            # A savepoint: a refused service call leaves the ActionRequest row (the outcome is
            # "refused") but none of its own writes.
            with transaction.atomic():
                result = fn()
        except DomainError as exc:
            self.refuse(str(exc))
            return None
        self.message = done
        self.outcome = done
        self.results.append(result)
        return result

    def refuse(self, why: str, *, status: int = 409) -> None:
        self.message = why
        self.status = status
        self.outcome = f"refused: {why}"


def action(
    *,
    permission: str,
    region: str,
    needs_reason: bool = False,
    name: str | None = None,
) -> Callable[[View], View]:
    """A POST action; see the module docstring. The view signature is ``(request, ..., act)``."""

    def decorate(view: View) -> View:
        action_name = name or view.__name__

        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method != "POST":
                return HttpResponseNotAllowed(["POST"])
            if not request.user.is_authenticated:
                return _login_response(request)
            if not request.user.has_perm(permission):
                return forbidden(request, permission=permission, region=region)
            act = ActionContext(
                name=action_name,
                region=region,
                request_id=request.POST.get("request_id", "").strip(),
                reason=request.POST.get("reason", "").strip()[:REASON_MAX],
                user=request.user,
            )
            if not REQUEST_ID_RE.match(act.request_id):
                act.error = "This form has expired; reload the page and try again."
            elif needs_reason and not act.reason:
                act.error = "Give a reason: it is recorded in the audit log."
            if act.error:
                act.status = 400
                act.message = act.error
                response = view(request, *args, act=act, **kwargs)
                response.status_code = 400
                return response
            return _run_once(view, request, act, args, kwargs)

        _stamp(
            wrapper,
            Policy(
                kind="action",
                permission=permission,
                region=region,
                needs_reason=needs_reason,
                name=action_name,
            ),
        )
        return wrapper  # type: ignore[return-value]

    return decorate


def _run_once(
    view: Callable[..., HttpResponse],
    request: HttpRequest,
    act: ActionContext,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> HttpResponse:
    """Store the request id and run the view in one transaction; a repeat only re-renders."""
    with transaction.atomic():
        try:
            with transaction.atomic():
                record = ActionRequest.objects.create(
                    request_id=act.request_id,
                    user=act.user,
                    username=act.actor,
                    action=act.name,
                )
        except IntegrityError:
            record = None
        if record is not None:
            response = view(request, *args, act=act, **kwargs)
            ActionRequest.objects.filter(pk=record.pk).update(outcome=act.outcome[:2000])
            if act.status != 200:
                response.status_code = act.status
            return response
    # This user used the id before (double click, retried request): do not act again.
    previous = ActionRequest.objects.filter(request_id=act.request_id, user=act.user).first()
    act.replayed = True
    act.message = "Already done" + (
        f": {previous.outcome}" if previous and previous.outcome else "."
    )
    if previous is not None and previous.action != act.name:
        act.message = "This request id was used for another action; nothing was done."
        act.status = 409
    response = view(request, *args, act=act, **kwargs)
    response.status_code = act.status
    return response
