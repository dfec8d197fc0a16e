"""Keyset (seek) pagination for the console's long lists: the jobs list, the audit log and the
approvals queue.

A page is "the next N rows after this row" in an indexed order, never "skip N rows" (OFFSET):
the database seeks straight to the cursor through the order's index, so page 20,000 costs what
page 1 costs, and a row inserted meanwhile never shifts a page by one. Cursors travel in the
query string (``after_row=`` for next, ``before_row=`` for previous, ``from_row=`` for a
poller that re-reads the page it shows, starting at its first row; not ``after``/``before``,
which the audit log's time filter already uses):

    ?sort=-created_at&after_row=WyItY3JlYXRlZF9hdCIsIjIwMjYtMTItMDFUMTI6MDM6MDdaIiwiai0xIl0

A cursor is the sort's name plus the last row's values of the order's columns, as URL-safe
base64 JSON. A cursor that does not decode, or belongs to another sort, is a 404
(``BadCursor``); a cursor past the end answers the last page. Nobody counts pages: the view
shows a capped total instead (``core.paging``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.db import connections
from django.db.models import F, Model, QuerySet, TextField, Value
from django.db.models.fields.tuple_lookups import (
    Tuple,
    TupleGreaterThan,
    TupleGreaterThanOrEqual,
    TupleLessThan,
    TupleLessThanOrEqual,
)
from django.db.models.functions import Cast
from django.db.models.lookups import GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual
from django.http import Http404, QueryDict
from django.utils.dateparse import parse_datetime

# SQLite keeps times as text, written with 3 or 6 fractional digits depending on who wrote them
# (``Now()`` or a Python datetime), and compares them as text. A cursor must carry the row's
# time exactly as stored, or the row next to it is shown twice or skipped; on SQLite the page
# query selects each time column's text as ``RAW + column``.
RAW = "keyset_raw_"

# The query-string names of the three cursors.
AFTER, BEFORE, FROM = "after_row", "before_row", "from_row"
CURSOR_PARAMS = (AFTER, BEFORE, FROM)
# Cursors longer than this are refused before decoding (ids are at most a few hundred chars).
CURSOR_MAX = 2048


class BadCursor(Http404):
    """A cursor that does not decode, or belongs to another sort: the page does not exist."""


@dataclass(frozen=True)
class Ordering:
    """One order a list offers: its ``?sort=`` key and the indexed columns it sorts on, the
    last of which is unique (so the order is total and a cursor names exactly one place)."""

    key: str
    columns: tuple[str, ...]
    descending: bool
    label: str = ""

    def order_by(self, *, reverse: bool = False) -> list[str]:
        desc = self.descending != reverse
        return [f"-{c}" if desc else c for c in self.columns]

    def values(self, row: Model) -> list[Any]:
        """The row's values of the order's columns: on SQLite a time is its stored text (see
        ``paginate``), so a seek from it compares like the ORDER BY."""
        values = []
        for column in self.columns:
            raw = getattr(row, RAW + column, None)
            values.append(StoredText(raw) if isinstance(raw, str) else getattr(row, column))
        return values


def encode(ordering: Ordering, values: Sequence[Any]) -> str:
    """The cursor naming ``values`` (a row's order columns) in ``ordering``."""
    plain = [ordering.key, *(_plain(v) for v in values)]
    text = json.dumps(plain, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return str(value) if isinstance(value, StoredText) else value


class StoredText(str):
    """A SQLite time exactly as stored: compared as text, never re-formatted."""


def decode(ordering: Ordering, model: type[Model], cursor: str, *, vendor: str) -> list[Any]:
    """The order columns' values a cursor names; ``BadCursor`` if it names nothing valid."""
    if len(cursor) > CURSOR_MAX:
        raise BadCursor("cursor too long")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        plain = json.loads(raw.decode())
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise BadCursor("cursor does not decode") from exc
    if not isinstance(plain, list) or len(plain) != len(ordering.columns) + 1:
        raise BadCursor("cursor has the wrong shape")
    if plain[0] != ordering.key:
        raise BadCursor("cursor belongs to another sort")
    values = []
    for column, value in zip(ordering.columns, plain[1:], strict=True):
        values.append(_typed(model._meta.get_field(column), value, vendor))
    return values


def _typed(field: Any, value: Any, vendor: str) -> Any:
    kind = field.get_internal_type()
    if kind == "DateTimeField":
        if not isinstance(value, str):
            raise BadCursor("cursor time is not text")
        if vendor == "sqlite":
            if parse_datetime(value) is None:
                raise BadCursor("cursor time does not parse")
            return StoredText(value)
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError as exc:
            raise BadCursor("cursor time does not parse") from exc
        if parsed.tzinfo is None:
            raise BadCursor("cursor time has no zone")
        return parsed
    if kind in ("AutoField", "BigAutoField", "IntegerField", "BigIntegerField"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadCursor("cursor number is not an integer")
        return value
    if not isinstance(value, str):
        raise BadCursor("cursor value is not text")
    return value


def seek(
    qs: QuerySet, ordering: Ordering, values: Sequence[Any], *, backward: bool, inclusive: bool
) -> QuerySet:
    """Rows strictly after (``backward``: before) ``values`` in ``ordering``; ``inclusive`` keeps
    the row itself. One row-value comparison, which both databases answer from the index."""
    greater = ordering.descending == backward
    # Stored text is compared as the text it is (no DateTimeField re-formatting on the way).
    values = [Value(str(v)) if isinstance(v, StoredText) else v for v in values]
    if len(ordering.columns) == 1:
        lhs: Any = F(ordering.columns[0])
        rhs: Any = values[0]
        lookups = (GreaterThanOrEqual, GreaterThan, LessThanOrEqual, LessThan)
    else:
        lhs = Tuple(*(F(column) for column in ordering.columns))
        rhs = tuple(values)
        lookups = (TupleGreaterThanOrEqual, TupleGreaterThan, TupleLessThanOrEqual, TupleLessThan)
    ge, gt, le, lt = lookups
    lookup = (ge if inclusive else gt) if greater else (le if inclusive else lt)
    return qs.filter(lookup(lhs, rhs))


@dataclass
class Page:
    """One page of a keyset-paged list, with the cursors of its neighbours."""

    rows: list[Any]
    ordering: Ordering
    # Cursor for the previous (newer) page; None on the first page.
    newer: str | None
    # Cursor for the next (older) page; None on the last page.
    older: str | None
    # Cursor of the first row: a poller re-reads the page from here (``from_row=``).
    first: str | None
    # No cursor was given (or it fell off the start): this is the list's first page.
    at_start: bool
    # A cursor past the end was asked for; this is the last page instead.
    fell_back: bool = False

    def cursor_of(self, row: Model) -> str:
        return encode(self.ordering, self.ordering.values(row))


def paginate(qs: QuerySet, ordering: Ordering, params: Mapping[str, str], *, per_page: int) -> Page:
    """The page ``params`` asks for (``after_row``, ``before_row`` or ``from_row``; none: the
    first page).

    At most two queries: the page itself (``per_page + 1`` rows, the extra one tells whether
    there is a next page) and, only when a cursor runs off the end, the last page instead.
    """
    model = qs.model
    vendor = connections[qs.db].vendor
    if vendor == "sqlite":
        times = [
            c
            for c in ordering.columns
            if model._meta.get_field(c).get_internal_type() == "DateTimeField"
        ]
        qs = qs.annotate(**{RAW + c: Cast(c, output_field=TextField()) for c in times})
    ordered = qs.order_by(*ordering.order_by())
    after, before, start = (params.get(name) or "" for name in CURSOR_PARAMS)
    if before:
        values = decode(ordering, model, before, vendor=vendor)
        rows = list(
            seek(qs, ordering, values, backward=True, inclusive=False).order_by(
                *ordering.order_by(reverse=True)
            )[: per_page + 1]
        )
        if not rows:
            return _first_page(ordered, ordering, per_page)
        more = len(rows) > per_page
        rows = rows[:per_page]
        rows.reverse()
        return _page(rows, ordering, has_newer=more, has_older=True, at_start=not more)
    if after or start:
        values = decode(ordering, model, after or start, vendor=vendor)
        rows = list(
            seek(ordered, ordering, values, backward=False, inclusive=bool(start and not after))[
                : per_page + 1
            ]
        )
        if not rows:
            return _last_page(qs, ordering, per_page)
        more = len(rows) > per_page
        return _page(rows[:per_page], ordering, has_newer=True, has_older=more, at_start=False)
    return _first_page(ordered, ordering, per_page)


def _first_page(ordered: QuerySet, ordering: Ordering, per_page: int) -> Page:
    rows = list(ordered[: per_page + 1])
    more = len(rows) > per_page
    return _page(rows[:per_page], ordering, has_newer=False, has_older=more, at_start=True)


def _last_page(qs: QuerySet, ordering: Ordering, per_page: int) -> Page:
    """A cursor past the end: the list's last ``per_page`` rows (read backwards, one query)."""
    rows = list(qs.order_by(*ordering.order_by(reverse=True))[: per_page + 1])
    more = len(rows) > per_page
    rows = rows[:per_page]
    rows.reverse()
    page = _page(rows, ordering, has_newer=more, has_older=False, at_start=not more)
    page.fell_back = True
    return page


def query_string(params: QueryDict, drop: Iterable[str] = (), **set_: str) -> str:
    """``params`` as a query string without ``drop`` (nor a poll's ``v`` or the old ``page``),
    with ``set_`` added: the links of a keyset-paged list (empty values are left out)."""
    skip = {*drop, "v", "page"}
    pairs = [(k, v) for k, values in params.lists() if k not in skip for v in values if v]
    pairs += [(k, v) for k, v in set_.items() if v]
    return urlencode(pairs)


def links(params: QueryDict, listing: Page, *, top: bool) -> dict[str, str]:
    """The URLs around a page (relative, "?…"): the newest page, the previous and next pages,
    and the page's poll, which re-reads it from its first row (``top``: it is the list's first
    page, so the poll also counts the rows that arrived above it)."""
    here = query_string(params, drop=(*CURSOR_PARAMS, "top"))
    before, after = listing.newer or "", listing.older or ""
    poll = [here]
    if listing.first:
        poll.append(urlencode({FROM: listing.first}))
    if top:
        poll.append("top=1")
    return {
        "newer_url": f"?{here}",
        "previous_url": "?" + query_string(params, drop=CURSOR_PARAMS, **{BEFORE: before}),
        "older_url": "?" + query_string(params, drop=CURSOR_PARAMS, **{AFTER: after}),
        "poll_url": "?" + "&".join(part for part in poll if part),
    }


def _page(
    rows: list[Any], ordering: Ordering, *, has_newer: bool, has_older: bool, at_start: bool
) -> Page:
    first = encode(ordering, ordering.values(rows[0])) if rows else None
    last = encode(ordering, ordering.values(rows[-1])) if rows else None
    return Page(
        rows=rows,
        ordering=ordering,
        newer=first if has_newer else None,
        older=last if has_older else None,
        first=first,
        at_start=at_start,
    )
