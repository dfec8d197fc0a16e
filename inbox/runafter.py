"""When a document's job may first be claimed: the ``run_after`` rule, one place for the
validator and the API's schema.

``run_after`` is an RFC 3339 date and time with a zone, ``2030-06-01T08:30:00Z`` or
``2030-06-01T10:30:00.5+02:00`` (seconds and their fraction may be left out; an offset may carry
seconds, as ``datetime.isoformat`` writes them). ``RUN_AFTER_PATTERN`` matches exactly the
strings the rule accepts, real calendar days included, so a schema-driven client never sends a
30 February; years run from 0002 to 9998, so every accepted time exists in UTC too.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

# ASCII classes only (no \d): Python's, Rust's and JSON Schema's regular expressions then read
# the pattern alike. Every month has days 01 to 28; all but February 29 and 30; the long months 31.
_MONTH_DAY = (
    r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
    r"|(?:0[13-9]|1[0-2])-(?:29|30)"
    r"|(?:0[13578]|1[02])-31)"
)
_YEAR = r"(?!0000|0001|9999)[0-9]{4}"
# Divisible by 4 and not by 100, or by 400 (0000 is out of range and matches neither).
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,6})?)?"
_ZONE = r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9])?)"
RUN_AFTER_PATTERN = rf"^{_DATE}T{_TIME}{_ZONE}$"
RUN_AFTER_EXAMPLE = "2030-06-01T08:30:00Z"
_RUN_AFTER = re.compile(RUN_AFTER_PATTERN)


def parse_run_after(value: str | None) -> dt.datetime | None:
    """A document's ``run_after`` (validated first) as an aware datetime in UTC: PostgreSQL
    refuses a timestamp whose offset is over 15 hours, and an offset may reach 23:59."""
    return dt.datetime.fromisoformat(value).astimezone(dt.UTC) if value else None


def run_after_problems(value: Any) -> list[str]:
    """Why ``value`` is not a ``run_after``, or [] (a value that is not text: the type check)."""
    if not isinstance(value, str):
        return []
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return [f"run_after: {value!r} is not an ISO 8601 date and time"]
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        return [f"run_after: {value!r} has no time zone (add Z or an offset such as +02:00)"]
    # fullmatch: Python's "$" would also accept a final newline.
    if not _RUN_AFTER.fullmatch(value):
        return [
            f"run_after: {value!r} is not in the form {RUN_AFTER_EXAMPLE} (RFC 3339: a date "
            "from 0002 to 9998, T, hours and minutes, optional seconds, then Z or an offset)"
        ]
    return []
