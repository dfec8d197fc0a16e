"""JSON documents read strictly: a key twice in one object is refused, not silently resolved.

JSON parsers disagree on which of two equal keys counts (Python's keeps the last, others the
first or refuse), so a document with one could mean one thing to its producer and another to
us. The producer API and ``enqueue`` read documents through ``loads``.
"""

from __future__ import annotations

import json
from typing import Any


class DuplicateKey(ValueError):
    """A key appears twice in one object; ``key`` names it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} appears twice in one object")
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKey(key)
        obj[key] = value
    return obj


def loads(text: str | bytes) -> Any:
    """``json.loads``, refusing a repeated key anywhere with ``DuplicateKey``."""
    return json.loads(text, object_pairs_hook=_unique_keys)
