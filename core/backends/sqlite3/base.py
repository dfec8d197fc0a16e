"""The project's SQLite engine: Django's, with the lean transaction start and commit of
``core.db.LeanSQLiteDatabaseWrapper`` (that module says what and why)."""

from core.db import LeanSQLiteDatabaseWrapper as DatabaseWrapper

__all__ = ["DatabaseWrapper"]
