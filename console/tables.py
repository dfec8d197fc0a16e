"""Helpers shared by the console's django-tables2 tables (capped totals, lazy pages)."""

from __future__ import annotations

from django.db.models import QuerySet
from django_tables2 import Table

from inbox.selectors import capped_count, count_label


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
