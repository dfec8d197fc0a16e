"""Template helpers shared by every console page: action form fields, lease widgets, charts.

Everything user-supplied that reaches HTML here goes through ``format_html`` / autoescaping;
numbers are formatted to strings first so nothing reaches markup unformatted.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from django import template
from django.urls import get_script_prefix, reverse
from django.utils import dateformat, timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import RFC3986_SUBDELIMS
from django.utils.safestring import SafeString

from console import tables
from core.paging import count_label
from inbox.models import JobState
from inbox.selectors import expiry_behaviour
from inbox.transitions import lapsed_outcome

register = template.Library()


@register.simple_tag
def request_id_field() -> SafeString:
    """A hidden ``request_id``, fresh per rendered form: a repeat POST of it acts once."""
    return format_html('<input type="hidden" name="request_id" value="{}">', uuid.uuid4().hex)


@register.simple_tag(takes_context=True)
def dashboard_poll(context: template.Context, region: str) -> SafeString:
    """The attributes that make a dashboard region poll the home page for itself alone.

    ``region`` is the region's id (``dashboard-runs``); its token and its poll interval come
    from the context the dashboard view builds (``versions`` and ``every``).
    """
    key = region.replace("-", "_")
    return format_html(
        'id="{}" data-v="{}" hx-get="{}" hx-target="this" hx-swap="outerHTML"'
        ' hx-trigger="every {}s" data-poll',
        region,
        context["versions"][key],
        reverse("console:home"),
        context["every"][key],
    )


@register.filter
def capped(count: int, cap: int | None = None) -> str:
    """A capped count as operators read it: 12 → "12", 10,001 → "10,000+"."""
    return count_label(int(count or 0), cap)


@register.filter
def on_expiry(job_type: str) -> str:
    """What the sweep does to a job of this type when its lease lapses."""
    return expiry_behaviour(job_type)


@register.filter
def lapse_words(job: object) -> str:
    """What the sweep will do to this held job when its lease lapses: "retried", "failed (max
    attempts)" or "parked for reconcile" (``inbox.transitions.lapsed_outcome``)."""
    outcome = lapsed_outcome(job)  # type: ignore[arg-type]
    if outcome == JobState.READY:
        return "retried"
    if outcome == JobState.FAILED:
        return "failed (max attempts)"
    return "parked for reconcile"


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


# Stands in for the argument while a route is reversed once; no route contains it.
_ARG = "url-arg-placeholder"


@functools.lru_cache(maxsize=256)
def _route(name: str, script_prefix: str) -> tuple[str, str]:
    """The URL of route ``name`` around its one argument: (before, after)."""
    before, _, after = reverse(name, args=[_ARG]).partition(_ARG)
    return before, after


@register.simple_tag
def id_url(name: str, value: object) -> str:
    """``{% url name value %}`` for a route with one ``str`` or ``path`` argument (a job id),
    with the route reversed once per process instead of once per link: a page of 50 reconcile
    cases made 330 ``reverse()`` calls, a quarter of its time.

    The argument is quoted as ``reverse()`` quotes it; a value one of those converters would
    refuse (empty, or with a "/" for ``str``) goes through ``reverse()`` itself, which decides."""
    text = str(value)
    if not text or "/" in text:
        return reverse(name, args=[text])
    before, after = _route(name, get_script_prefix())
    return before + quote(text, safe=RFC3986_SUBDELIMS + "/~:@") + after


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


# --- times -----------------------------------------------------------------------------------


@register.filter(name="age_words")
def age_words(seconds: float) -> str:
    """ "12 s ago", "3 min ago", "2 h 5 min ago", "3 days ago" (console.js says the same)."""
    seconds = max(math.floor(seconds), 0)
    if seconds < 60:
        return f"{seconds} s ago"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min ago"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60} min ago"
    return f"{hours // 24} days ago"


def duration_words(seconds: float) -> str:
    """ "45 s", "6 min", "2 h 5 min": how long something has lasted."""
    return age_words(seconds).removesuffix(" ago")


@register.simple_tag
def age_text(seconds: float) -> str:
    """A duration in words ("6 min"), for ages computed on the server."""
    return duration_words(seconds)


def clock_text(value: dt.datetime, fmt: str = "Y-m-d H:i:s") -> str:
    """A time in the console's zone with the zone's name: "2026-12-01 12:03:07 UTC"."""
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    return f"{dateformat.format(local, fmt)} {dateformat.format(local, 'T')}"


@register.simple_tag
def when(
    value: dt.datetime | None,
    now: dt.datetime | None = None,
    *,
    fmt: str = "Y-m-d H:i:s",
    ago: bool = True,
) -> SafeString:
    """A time with its zone and, ticking, its relative age: "12:03:07 UTC (3 min ago)"."""
    if value is None:
        return format_html('<span class="muted">—</span>')
    now = now or timezone.now()
    stamp = format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        clock_text(value),
        clock_text(value, fmt),
    )
    if not ago:
        return stamp
    seconds = (now - value).total_seconds()
    if seconds < 0:
        return stamp
    return format_html(
        '{} <span class="age muted" data-age="{}">{}</span>',
        stamp,
        str(math.floor(seconds)),
        age_words(seconds),
    )


@register.simple_tag
def stuck_words(stuck: object, now: dt.datetime) -> str:
    """Why a run is stuck, as the runs page and dashboard say it: "owner dead since 12:03:07
    UTC", "no progress for 6 min"."""
    kind = getattr(stuck, "kind", "")
    since = getattr(stuck, "since", None)
    if kind == "no_progress":
        return f"no progress for {duration_words(getattr(stuck, 'for_seconds', 0.0))}"
    reason = str(getattr(stuck, "reason", "stuck"))
    if since is None:
        return "owner has no heartbeat (never seen alive)"
    words = "owner stopped" if "stopped" in reason else "owner dead"
    return f"{words} since {clock_text(since, 'H:i:s')}"


@register.simple_tag
def orphan_words(orphan: object) -> str:
    """What an orphaned job is waiting for: "holder w-1 dead since 12:03:07 UTC; in 40 s the
    sweep will offer it again (READY)"."""
    holder = getattr(orphan, "holder", "") or "(none)"
    since = getattr(orphan, "dead_since", None)
    dead = f"dead since {clock_text(since, 'H:i:s')}" if since else "has no heartbeat"
    lapses_in = int(getattr(orphan, "lapses_in", 0))
    sweep = getattr(orphan, "sweep_words", "")
    return f"holder {holder} {dead}; when the lease lapses in {lapses_in} s the sweep will {sweep}"


# --- charts ------------------------------------------------------------------------------------


def nice_ceiling(value: float) -> int:
    """The axis maximum: the smallest 1, 2, 2.5 or 5 × 10^k at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= value:
            return math.ceil(step * magnitude)
    return math.ceil(10 * magnitude)  # pragma: no cover


@register.simple_tag
def series_class(index: int) -> str:
    """The css class of the ``index``-th scope's line (six colours, then they repeat)."""
    return f"series-{int(index) % SERIES_COLOURS}"


# Distinct line colours in console.css (.series-0 … .series-5).
SERIES_COLOURS = 6


def _join(parts: Sequence[SafeString]) -> SafeString:
    """Concatenate markup that went through ``format_html`` (anything else is escaped)."""
    return format_html_join("", "{}", ((part,) for part in parts))


def _fmt(number: float) -> str:
    return f"{number:.1f}"


# The chart's frame (viewBox units): plot area inside the axes' margins.
CHART_W, CHART_H = 640, 190
PLOT_L, PLOT_R, PLOT_T, PLOT_B = 46, 44, 26, 24


@dataclass(frozen=True)
class _Plot:
    """The throughput chart's plot area: where a minute and a value land (viewBox units)."""

    count: int
    top: int
    width: float = CHART_W - PLOT_L - PLOT_R
    height: float = CHART_H - PLOT_T - PLOT_B

    @property
    def bottom(self) -> float:
        return PLOT_T + self.height

    @property
    def step(self) -> float:
        return self.width / self.count

    def y_of(self, value: float) -> float:
        return self.bottom - value / self.top * self.height

    def x_mid(self, index: int) -> str:
        return _fmt(PLOT_L + index * self.step + self.step / 2)


def _chart_axes(plot: _Plot, points: Sequence[tuple[str, int]]) -> list[SafeString]:
    """Gridlines and labels of both axes, their titles, and every 15th minute below."""
    parts: list[SafeString] = []
    # Left axis: gridlines and labels at 0, half and the top.
    for value in (0, plot.top / 2, plot.top):
        y = _fmt(plot.y_of(value))
        parts.append(
            format_html(
                '<line class="grid" x1="{}" x2="{}" y1="{}" y2="{}"></line>'
                '<text class="axis" x="{}" y="{}" text-anchor="end">{}</text>',
                str(PLOT_L),
                str(PLOT_L + plot.width),
                y,
                y,
                str(PLOT_L - 4),
                _fmt(float(y) + 3),
                f"{value:g}",
            )
        )
    parts.append(
        format_html(
            '<text class="axis-title" x="{}" y="{}">jobs / min</text>'
            '<text class="axis-title" x="{}" y="{}" text-anchor="end">% failed or unknown</text>',
            str(PLOT_L - 40),
            str(PLOT_T - 14),
            str(CHART_W - 2),
            str(PLOT_T - 14),
        )
    )
    # Right axis (rate).
    for share in (0.0, 0.5, 1.0):
        y = _fmt(plot.bottom - share * plot.height)
        parts.append(
            format_html(
                '<text class="axis rate-axis" x="{}" y="{}">{}</text>',
                str(PLOT_L + plot.width + 4),
                _fmt(float(y) + 3),
                f"{share:.0%}",
            )
        )
    for index, (label, _value) in enumerate(points):
        if index % 15 == 0 or index == plot.count - 1:
            parts.append(
                format_html(
                    '<text class="axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                    plot.x_mid(index),
                    str(CHART_H - 8),
                    label,
                )
            )
    return parts


def _chart_bars(plot: _Plot, points: Sequence[tuple[str, int]]) -> SafeString:
    return format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>',
        (
            (
                _fmt(PLOT_L + index * plot.step + 0.5),
                _fmt(plot.y_of(value)),
                _fmt(max(plot.step - 1, 0.5)),
                _fmt(plot.bottom - plot.y_of(value)),
                f"{label}: {value}",
            )
            for index, (label, value) in enumerate(points)
        ),
    )


def _scope_lines(plot: _Plot, by_scope: dict[str, list[int]]) -> list[SafeString]:
    lines: list[SafeString] = []
    for n, (scope, series) in enumerate(by_scope.items()):
        coords = " ".join(f"{plot.x_mid(i)},{_fmt(plot.y_of(v))}" for i, v in enumerate(series))
        lines.append(
            format_html(
                '<polyline class="series {}" points="{}"><title>{}</title></polyline>',
                series_class(n),
                coords,
                f"scope {scope}",
            )
        )
    return lines


def _rate_lines(plot: _Plot, rates: list[float | None]) -> list[SafeString]:
    """The failed-or-unknown share: a line that breaks over minutes in which nothing finished
    (a lone minute is a dot)."""
    segment: list[str] = []
    segments: list[list[str]] = []
    for i, rate in enumerate(rates):
        if rate is None:
            if segment:
                segments.append(segment)
            segment = []
            continue
        segment.append(f"{plot.x_mid(i)},{_fmt(plot.bottom - rate * plot.height)}")
    if segment:
        segments.append(segment)
    lines: list[SafeString] = []
    for seg in segments:
        if len(seg) == 1:
            x, y = seg[0].split(",")
            lines.append(
                format_html('<circle class="rate" cx="{}" cy="{}" r="1.8"></circle>', x, y)
            )
        else:
            lines.append(
                format_html(
                    '<polyline class="rate" points="{}"><title>failed or unknown</title>'
                    "</polyline>",
                    " ".join(seg),
                )
            )
    return lines


@register.simple_tag
def throughput_chart(throughput: object, *, title: str = "") -> SafeString:
    """Finished jobs per minute: bars for the total on a labelled left axis (jobs / min), a
    line per scope on the same axis, and the failed-or-unknown share as a dashed line on a
    right axis (0–100 %). Server-rendered SVG: no JS library, no CSP exception."""
    points: Sequence[tuple[str, int]] = getattr(throughput, "points", [])
    by_scope: dict[str, list[int]] = getattr(throughput, "by_scope", {})
    rates: list[float | None] = list(getattr(throughput, "bad_rate", []))
    peak = max((value for _, value in points), default=0)
    plot = _Plot(count=max(len(points), 1), top=nice_ceiling(peak))
    lines = [*_scope_lines(plot, by_scope), *_rate_lines(plot, rates)]
    return format_html(
        '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}">'
        "<title>{}</title>{}{}{}</svg>",
        str(CHART_W),
        str(CHART_H),
        title,
        title,
        _join(_chart_axes(plot, points)),
        _chart_bars(plot, points),
        _join(lines),
    )


@register.simple_tag
def ready_age_chart(ready: object) -> SafeString:
    """One scope's READY backlog by age: a bar per age bucket (count on top), oldest first
    emphasised when anything waits an hour or more."""
    buckets: list[tuple[str, int]] = list(getattr(ready, "buckets", []))
    scope = str(getattr(ready, "scope", ""))
    width, height, base = 220, 84, 66
    count = max(len(buckets), 1)
    step = width / count
    peak = max((n for _, n in buckets), default=0)
    top = nice_ceiling(peak)
    shapes: list[SafeString] = []
    for i, (label, n) in enumerate(buckets):
        bar_h = (n / top) * (base - 14) if n else 0.0
        x = i * step + 3
        shown = count_label(n, 1000)
        css = "bar old" if i == count - 1 and n else "bar"
        shapes.append(
            format_html(
                '<rect class="{}" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>'
                '<text class="axis" x="{}" y="{}" text-anchor="middle">{}</text>'
                '<text class="axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                css,
                _fmt(x),
                _fmt(base - bar_h),
                _fmt(step - 6),
                _fmt(bar_h),
                f"{scope}: {shown} READY waiting {label}",
                _fmt(x + (step - 6) / 2),
                _fmt(base - bar_h - 3),
                shown,
                _fmt(x + (step - 6) / 2),
                str(height - 4),
                label,
            )
        )
    return format_html(
        '<svg class="chart-small" viewBox="0 0 {} {}" role="img" aria-label="{}">{}</svg>',
        str(width),
        str(height),
        f"READY jobs of scope {scope} by how long they have waited",
        _join(shapes),
    )
