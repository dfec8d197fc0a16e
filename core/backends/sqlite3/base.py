"""Django's SQLite backend with a leaner transaction start and commit.

Every job step on SQLite is one ``atomic()`` block: ``BEGIN IMMEDIATE``, a few statements,
``COMMIT``. Django issues that ``BEGIN`` through a new cursor and its whole wrapper chain, and
wraps the ``COMMIT`` in a query-log context that only logs when queries are logged. Going
around both saves 2-4 % of the CPU of a single-job enqueue, which on SQLite is one transaction
per job (``bench/sqlite_txn.py``; bench/results/ANALYSIS-20261204d).

Here both go straight to the driver, inside Django's error translation and thread check, while
nothing is watching. When queries are logged (DEBUG, a test counting queries) or an execute
wrapper is installed, Django's own path runs, so the query log and the wrappers see exactly
what they saw before. ``atomic()`` itself, its savepoints, the autocommit bookkeeping and the
on-commit hooks are Django's, unchanged.
"""

from __future__ import annotations

from django.db.backends.sqlite3 import base


class DatabaseWrapper(base.DatabaseWrapper):
    def _start_transaction_under_autocommit(self) -> None:
        if self.queries_logged or self.execute_wrappers:
            return super()._start_transaction_under_autocommit()
        begin = "BEGIN" if self.transaction_mode is None else f"BEGIN {self.transaction_mode}"
        self.validate_thread_sharing()
        with self.wrap_database_errors:
            self.connection.execute(begin)
        return None

    def _commit(self) -> None:
        if self.connection is None or self.queries_logged:
            return super()._commit()
        with self.wrap_database_errors:
            return self.connection.commit()
