"""Admin helpers that keep changelists usable at millions of rows."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.db import connections
from django.utils.functional import cached_property

# Above this many matching rows the changelist shows "N+" pages instead of an exact count.
COUNT_CAP = 10_000


class EstimatedCountPaginator(Paginator):
    """A paginator whose count never scans the whole table.

    Unfiltered PostgreSQL tables use the planner's estimate (pg_class.reltuples); everything
    else counts at most ``COUNT_CAP + 1`` rows, so the number of pages is bounded too.
    """

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        model = getattr(qs, "model", None)
        if model is None:
            return super().count
        conn = connections[qs.db]
        if conn.vendor == "postgresql" and not qs.query.where:
            with conn.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [model._meta.db_table],
                )
                row = cursor.fetchone()
            if row and row[0] > COUNT_CAP:
                return int(row[0])
        return qs.order_by()[: COUNT_CAP + 1].count()
