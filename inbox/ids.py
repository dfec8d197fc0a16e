"""What a job id may be: the one rule every way in (the API, ``enqueue``, the task backend, any
``create_job`` caller) goes through, because ``validate_job_document`` applies it.

An id is producer-chosen text, and it must stay readable, linkable and actionable everywhere it
is shown: on a console page, in a ``Location`` header, in a log line, in a link a browser
follows. So an id is 1 to 200 characters of printable text:

- no control character (C0, DEL, C1: a newline, a tab, NUL …) and no line or paragraph
  separator: they split log lines and headers, and a URL route could not match them;
- no bidirectional formatting character: it makes an id display as another one;
- not blank, and no path segment that is ``.`` or ``..`` (``a/../b``): browsers and HTTP clients
  resolve those before sending, so such a link would reach another page.

Slashes, percent signs, spaces, ``?``, ``#`` and any other Unicode are fine: routes take the id
as their last part and ``reverse()`` quotes it.

``ID_PATTERN`` says the same in a regular expression that both Python and the OpenAPI schema's
JSON Schema read alike; ``id_problems`` gives the reasons in words.

``WHITESPACE`` is what "blank" means for every text field (``str.isspace``), written as a
regular-expression class so the schema's patterns say the same as the validator's ``strip()``.
"""

from __future__ import annotations

import re

MAX_ID_LENGTH = 200

# Every character ``str.isspace`` calls whitespace (the validator's "blank"), as a class body:
# spelled out because ``\s`` is another set in JSON Schema (ECMA 262) than in Python.
WHITESPACE = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"

# The characters an id may not hold (NUL is refused, with its own message, for all text).
_CONTROL = r"\x01-\x1f\x7f-\x9f\u2028\u2029"
_BIDI = r"\u200e\u200f\u202a-\u202e\u2066-\u2069"
_REFUSED = re.compile(f"[{_CONTROL}{_BIDI}]")
_DOT_SEGMENT = r"\.\.?(?:/|$)"
ID_PATTERN = (
    rf"^(?!{_DOT_SEGMENT})(?!.*/{_DOT_SEGMENT})(?=.*[^{WHITESPACE}])"
    rf"[^\x00{_CONTROL}{_BIDI}]{{1,{MAX_ID_LENGTH}}}$"
)


def id_problems(name: str, value: str) -> list[str]:
    """Why ``value`` cannot be an id (``name`` labels the messages), or []."""
    problems = []
    if len(value) > MAX_ID_LENGTH:
        problems.append(f"{name}: longer than {MAX_ID_LENGTH} characters")
    if bad := _REFUSED.search(value):
        char = bad.group()
        problems.append(
            f"{name}: must not contain {char!r} (U+{ord(char):04X}): an id is printable text, "
            "without control or bidirectional formatting characters"
        )
    if any(segment in (".", "..") for segment in value.split("/")):
        problems.append(
            f"{name}: must not have a '.' or '..' segment between slashes: a link to it would "
            "lead elsewhere"
        )
    return problems
