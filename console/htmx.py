"""What the console's pages need to speak HTMX: which template a request gets, stable DOM ids.

Every page view picks its template with ``region_template``: the whole page for a normal
request, only the region an HTMX request targets (``"page.html#region"``) otherwise.

A polling region carries its version (``data-v``, from ``version_of``); console.js sends it back
as ``?v=`` and ``unchanged`` tells the view to answer 204 with nothing rendered (htmx swaps
nothing on a 204).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console import keyset
from core.paging import count_label


def region_template(
    request: HttpRequest,
    template: str,
    regions: Collection[str],
    *,
    default: str | None,
    targets: Mapping[str, str] | None = None,
) -> str:
    """``template`` for a full page; ``template#<region>`` for an HTMX request.

    ``regions`` are the partials an HTMX request may ask for by targeting (``HX-Target``) the
    element whose id is the partial's name; ``targets`` maps other element ids (made with
    ``dom_id``) to their partial. Any other target gets ``default``, or the full page when
    ``default`` is None. A history restore (back button after an htmx cache miss) always gets
    the full page: htmx swaps it into ``<body>``.
    """
    htmx = getattr(request, "htmx", None)
    if not htmx or htmx.history_restore_request:
        return template
    target = htmx.target or ""
    region = target if target in regions else (targets or {}).get(target, default)
    return f"{template}#{region}" if region else template


def dom_id(prefix: str, key: str) -> str:
    """A stable, HTML-safe element id for any job id, scope or store name."""
    return f"{prefix}-{hashlib.sha1(key.encode('utf-8')).hexdigest()[:12]}"


def version_of(*parts: object) -> str:
    """A region's version: equal parts render an equal region. Parts leave the ticking clock
    out (ages and countdowns tick in the browser); anything else the region shows goes in."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def unchanged(request: HttpRequest, version: str) -> HttpResponse | None:
    """A 204 for a poll that already shows ``version``, else None (render the region)."""
    htmx = getattr(request, "htmx", None)
    if htmx and not htmx.history_restore_request and request.GET.get("v") == version:
        return HttpResponse(status=204)
    return None


def poll_answer(
    request: HttpRequest, *, region: str, template: str, token: str, context: dict[str, Any]
) -> HttpResponse | None:
    """The answer to a poll of ``region`` (the rows of the jobs list, the audit log): 204 while
    the rows would render as ``token`` says, else the region alone; None when this request is
    not that poll (a history restore never is: it wants the whole page)."""
    htmx = getattr(request, "htmx", None)
    if not htmx or htmx.target != region or htmx.history_restore_request:
        return None
    return unchanged(request, token) or render(request, f"{template}#{region}", context)


# Above this many newer rows a live list says "99+ newer": a count that stops at the cap.
NEWER_CAP = 99


def live_rows(
    request: HttpRequest, listing: keyset.Page, *, top: bool, newer: int | None, token: str
) -> dict[str, Any]:
    """What every live list's rows region renders with beside its rows: the keyset links, the
    "N newer" line above a first page and the token its poll compares."""
    return {
        **keyset.links(request.GET, listing, top=top),
        "newer": newer,
        "newer_label": count_label(newer or 0, NEWER_CAP),
        "token": token,
    }
