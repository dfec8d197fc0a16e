"""Template helpers shared by every console page: action form fields, lease widgets, charts.

Everything user-supplied that reaches HTML here goes through ``format_html`` / autoescaping;
numbers are formatted to strings first so nothing reaches markup unformatted.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Sequence

from django import template
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from console import tables
from core.paging import count_label
from inbox.selectors import expiry_behaviour

register = template.Library()


@register.simple_tag
def request_id_field() -> SafeString:
    """A hidden ``request_id``, fresh per rendered form: a repeat POST of it acts once."""
    return format_html('<input type="hidden" name="request_id" value="{}">', uuid.uuid4().hex)


@register.filter
def capped(count: int, cap: int | None = None) -> str:
    """A capped count as operators read it: 12 → "12", 10,001 → "10,000+"."""
    return count_label(int(count or 0), cap)


@register.filter
def on_expiry(job_type: str) -> str:
    """What the sweep does to a job of this type when its lease lapses."""
    return expiry_behaviour(job_type)


@register.filter
def subject_url(event: object) -> str:
    """The console page of an audit event's subject (job or run)."""
    return tables.subject_url(event)


@register.filter
def detail_text(detail: object) -> str:
    """An audit event's detail as one compact line of JSON (autoescaped by the template)."""
    return tables.detail_text(detail)


@register.simple_tag(takes_context=True)
def nav_link(context: template.Context, url_name: str, label: str, *, exact: bool = False) -> str:
    """A main-menu link, marked as the current page anywhere in its area (at or below its URL).

    ``exact``: only the URL itself (the dashboard's is "/", a prefix of every page).
    """
    url = reverse(url_name)
    request = context.get("request")
    path = request.path if request is not None else ""
    current = path == url if exact else path.startswith(url)
    if current:
        return format_html('<a href="{}" aria-current="page">{}</a>', url, label)
    return format_html('<a href="{}">{}</a>', url, label)


@register.simple_tag
def fresh_request_id() -> str:
    """A new request id for a form whose hidden input is rendered by hand (OOB refresh)."""
    return uuid.uuid4().hex


@register.inclusion_tag("components/reason-field.html")
def reason_field(
    *, required: bool = True, label: str = "Reason", field_id: str = "", value: str = ""
) -> dict[str, object]:
    """The reason input every audited action carries (recorded with the user)."""
    return {
        "required": required,
        "label": label,
        "field_id": field_id or f"reason-{uuid.uuid4().hex[:8]}",
        "value": value,
    }


def _seconds_between(later: dt.datetime | None, earlier: dt.datetime | None) -> int | None:
    """Whole seconds from ``earlier`` to ``later`` (negative once ``later`` has passed)."""
    if later is None or earlier is None:
        return None
    return math.floor((later - earlier).total_seconds())


def lease_text(remaining: int | None, *, expired_label: str = "awaiting sweep") -> str:
    """The words a lease shows; console.js writes the same words every second."""
    if remaining is None:
        return "no lease"
    if remaining >= 0:
        return f"{remaining} s left"
    return f"expired {-remaining} s ago — {expired_label}"


@register.filter
def seconds_left(lease_until: dt.datetime | None, now: dt.datetime) -> int | None:
    """Whole seconds until ``lease_until`` by the database clock (negative once lapsed)."""
    return _seconds_between(lease_until, now)


@register.filter
def lease_words(remaining: int | None) -> str:
    """ "12 s left" / "expired 3 s ago — awaiting sweep" (console.js writes the same words)."""
    return lease_text(remaining)


@register.inclusion_tag("components/lease-countdown.html")
def lease_countdown(
    *,
    lease_until: dt.datetime | None,
    now: dt.datetime,
    held: bool = True,
    url: str = "",
    dom_id: str = "lease-countdown",
    poll_seconds: int = 10,
) -> dict[str, object]:
    """A job's lease: remaining seconds by the database clock, ticked client-side."""
    remaining = _seconds_between(lease_until, now) if held else None
    return {
        "dom_id": dom_id,
        "remaining": "" if remaining is None else str(remaining),
        "text": lease_text(remaining) if held else "not held",
        "expired": remaining is not None and remaining < 0,
        "held": held and remaining is not None,
        # Only a held lease polls; the page's summary region notices a new claim.
        "url": url if held else "",
        "poll": f"every {int(poll_seconds)}s",
    }


@register.inclusion_tag("components/lease-bar.html")
def lease_bar(
    *,
    started_at: dt.datetime | None,
    expires_at: dt.datetime | None,
    now: dt.datetime,
    dom_id: str,
    expired_label: str = "binds nobody",
) -> dict[str, object]:
    """A run's lease as a <progress> bar (no inline style: strict CSP) plus a countdown."""
    total = _seconds_between(expires_at, started_at)
    remaining = _seconds_between(expires_at, now)
    total = max(total or 0, 1)
    return {
        "dom_id": dom_id,
        "total": str(total),
        "remaining": "" if remaining is None else str(remaining),
        "value": str(max(min(remaining or 0, total), 0)),
        "text": lease_text(remaining, expired_label=expired_label),
        "expired": remaining is not None and remaining < 0,
        "expired_label": expired_label,
    }


@register.simple_tag
def svg_chart(
    points: Sequence[tuple[str, int]],
    *,
    title: str = "",
    width: int = 600,
    height: int = 120,
) -> SafeString:
    """An inline bar chart rendered on the server: no JS library, no CSP exception."""
    count = max(len(points), 1)
    peak = max((value for _, value in points), default=0)
    scale = (height - 14) / peak if peak else 0.0
    bar_w = width / count
    bars = []
    for index, (label, value) in enumerate(points):
        bar_h = value * scale
        bars.append(
            (
                f"{index * bar_w + 0.5:.1f}",
                f"{height - bar_h:.1f}",
                f"{max(bar_w - 1, 0.5):.1f}",
                f"{bar_h:.1f}",
                f"{label}: {value}",
            )
        )
    rects = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>',
        bars,
    )
    return format_html(
        '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}" '
        'preserveAspectRatio="none"><title>{}</title>'
        '<text x="2" y="10" class="chart-peak">peak {}</text>{}</svg>',
        str(width),
        str(height),
        title,
        title,
        str(peak),
        rects,
    )
