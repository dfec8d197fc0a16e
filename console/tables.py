"""Helpers shared by the console's django-tables2 tables (capped totals, lazy pages)."""

from __future__ import annotations

import datetime as dt

from django.db.models import QuerySet
from django.utils import dateformat, timezone
from django_tables2 import Column, Table

from core.paging import capped_count, count_label


class TimeColumn(Column):
    """A timestamp in the current time zone as ``Y-m-d H:i:s``, rendered in Python.

    django-tables2's ``DateTimeColumn`` is a ``TemplateColumn``: it builds and renders a small
    template for every cell, which was a quarter of the jobs list's render time at 50 rows.
    """

    def __init__(self, *args, fmt: str = "Y-m-d H:i:s", **kwargs) -> None:
        self.fmt = fmt
        super().__init__(*args, **kwargs)

    def render(self, value: dt.datetime) -> str:
        if timezone.is_aware(value):
            value = timezone.localtime(value)
        return dateformat.format(value, self.fmt)


def label_page(table: Table, qs: QuerySet) -> None:
    """Attach "rows 51–100 of 10,000+" to a table paged by LazyPaginator (which has no count).

    The total is a capped count (one bounded query), never a COUNT(*) of the whole table.
    """
    page = getattr(table, "page", None)
    table.total_label = count_label(capped_count(qs))
    table.rows_label = ""
    if page is not None and len(page.object_list):
        start = (page.number - 1) * table.paginator.per_page + 1
        table.rows_label = f"rows {start:,}–{start + len(page.object_list) - 1:,}"
