"""Login throttling with django-axes: its hooks, named in config/settings.py.

- ``LoginThrottleBackend``: axes' backend, except that an ``authenticate()`` without a request
  (a script, the shell, a test) is not a web login: there is no address to count and nothing to
  throttle, so it passes on to the next backend instead of raising.
- ``client_ip``: the address an attempt counts against, also behind a TLS proxy.
- ``login_locked_out``: a lockout is the console's login page with the reason (429).
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest, HttpResponse


class LoginThrottleBackend(AxesStandaloneBackend):
    """Refuse a locked-out user name or address; see the module docstring."""

    def authenticate(self, request: HttpRequest | None, *args: Any, **kwargs: Any) -> None:
        if request is None:
            return None
        return super().authenticate(request, *args, **kwargs)


def client_ip(request: HttpRequest) -> str:
    """The address a login attempt counts against.

    ``REMOTE_ADDR``, or — behind ``CONSOLE_TRUSTED_PROXIES`` proxies that each append to
    ``X-Forwarded-For`` — the address the outermost trusted proxy saw. Entries before it are
    the client's own claims and are not trusted (else anyone could pick their address).
    """
    count = getattr(settings, "CONSOLE_TRUSTED_PROXIES", 0)
    if count > 0:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if len(hops) >= count:
            return hops[-count]
    return request.META.get("REMOTE_ADDR", "")


def login_locked_out(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """The login page, saying that this user name or address is locked out and for how long
    (HTTP 429 with Retry-After)."""
    from django.contrib.auth.forms import AuthenticationForm
    from django.shortcuts import render

    cool_off = getattr(settings, "AXES_COOLOFF_TIME", None)
    seconds = int(cool_off.total_seconds()) if cool_off else 0
    context = {
        "form": AuthenticationForm(request),
        "locked_out": True,
        "cooloff_minutes": max(1, round(seconds / 60)) if seconds else 0,
        "next": request.POST.get("next", "") if request.method == "POST" else "",
    }
    response = render(request, "console/login.html", context, status=429)
    if seconds:
        response["Retry-After"] = str(seconds)
    return response
