"""A job's seal: the sha256 of the canonical JSON of its immutable fields. Written when the job
becomes READY and checked at its claim, its authorization and its outcome, so a job whose
identity changed after approval is never acted on."""

from __future__ import annotations

import functools
import hashlib
import json
import operator
from collections.abc import Mapping
from typing import Any

# Fields sealed into the fingerprint: a job's identity, checked before anything acts on it. The
# first five are columns.
IMMUTABLE_COLUMNS = ("job_type", "object_id", "vault_path", "mission_id", "approval_id")
IMMUTABLE_PAYLOAD_FIELDS = (
    "expected_commit",
    "expected_provenance_hash",
    "delete_request_id",
    "source_commit",
    "provenance_hash",
)


def fingerprint_values(*, columns: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    values = {name: columns.get(name) for name in IMMUTABLE_COLUMNS}
    values.update({name: payload.get(name) for name in IMMUTABLE_PAYLOAD_FIELDS})
    return values


def compute_fingerprint(*, columns: Mapping[str, Any], payload: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the immutable fields."""
    return fingerprint_from(tuple(map(columns.get, IMMUTABLE_COLUMNS)), payload)


def fingerprint_from(columns: tuple[Any, ...], payload: Mapping[str, Any]) -> str:
    """``compute_fingerprint`` of the immutable columns' values, in ``IMMUTABLE_COLUMNS``
    order: the writers' seal checks take them from a row or a model with one getter, not
    through a dict per check."""
    values = (*columns, *map(payload.get, IMMUTABLE_PAYLOAD_FIELDS))
    # Only text and nulls are memoised: 1, 1.0 and True are equal keys but different JSON.
    if _MEMO_TYPES.issuperset(map(type, values)):
        return _fingerprint_of_text(values)
    canonical = json.dumps(
        dict(zip(_FINGERPRINT_NAMES, values, strict=True)),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=4096)
def _fingerprint_of_text(values: tuple[str | None, ...]) -> str:
    """The seal of text-and-null values (every seal the writers check), memoised: a worker
    checks the same job's seal at its claim, its authorization and its outcome, and a pure
    function of the values need not run thrice. The canonical JSON is filled into its one
    template, as ``json.dumps`` would write it, without building a dict to sort."""
    canonical = _CANONICAL % tuple(map(_json_text, _SORTED(values)))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


_FINGERPRINT_NAMES = (*IMMUTABLE_COLUMNS, *IMMUTABLE_PAYLOAD_FIELDS)
_MEMO_TYPES = frozenset({str, type(None)})
# The canonical JSON of text-and-null values: the names in sorted order, a ``%s`` for each
# value, and the values' positions in that order (``test_fast_canonical_is_json_dumps``).
_SORTED_NAMES = sorted(_FINGERPRINT_NAMES)
_CANONICAL = "{" + ",".join(f"{json.dumps(n)}:%s" for n in _SORTED_NAMES) + "}"
_SORTED = operator.itemgetter(*(_FINGERPRINT_NAMES.index(n) for n in _SORTED_NAMES))


def _json_text(value: str | None) -> str:
    return "null" if value is None else _encode_text(value)


# The string encoder ``json.dumps(..., ensure_ascii=False)`` uses (C where available).
_encode_text = json.encoder.encode_basestring
