"""When a request wants only a region instead of the whole page."""

from __future__ import annotations

from django.http import HttpRequest


def wants_fragment(request: HttpRequest) -> bool:
    """An htmx request, except a history restore (back button after a cache miss), which
    must get the whole page because htmx swaps it into <body>."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.history_restore_request
