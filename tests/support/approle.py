"""A PostgreSQL role that does not own the tables, set up with docs/postgres-app-role.sql.

Used by tests/audit/test_app_role.py and, when ``CONSOLE_TEST_APP_ROLE`` names a role, by
``proc_db`` (tests/support/procdb.py): worker and command processes then connect as that role
while the test itself reads and sets up as the owner — the CI's run "as a role that does not
own the tables".
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
SQL_FILE = ROOT / "docs" / "postgres-app-role.sql"
# The role name the SQL file grants to.
FILE_ROLE = "console_app"


def grants_sql(role: str) -> str:
    """The file's statements for ``role`` (comments dropped)."""
    text = SQL_FILE.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("--")]
    return re.sub(rf"\b{FILE_ROLE}\b", f'"{role}"', "\n".join(lines))


def ensure_role(admin_url: str, role: str) -> None:
    """Create the login role once per cluster (several test sessions may race to do it)."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            f"""DO $$ BEGIN CREATE ROLE "{role}" LOGIN;
            EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"""
        )


def apply_grants(owner_url: str, role: str) -> None:
    """Run the README's grants in the database ``owner_url`` names, as its owner."""
    import psycopg

    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute(grants_sql(role))


def as_role(url: str, role: str) -> str:
    """``url`` with ``role`` as the user (trust authentication on the loopback)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{role}@{host}", parts.path, parts.query, parts.fragment))
