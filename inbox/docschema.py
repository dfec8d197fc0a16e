"""A job document as JSON Schema (2020-12, as OpenAPI 3.1 reads it), one schema per job type.

``validate_job_document`` stays the judge; this module says the same rules in JSON Schema, built
from the constants and the registry the validator reads (``TEXT_LIMITS``, ``ID_PATTERN``,
``RUN_AFTER_PATTERN``, the retry bounds, ``INBOX_JOB_TYPES``, the task queues), so the API's
schema cannot drift from what the server enforces. Called by the API when it builds its OpenAPI
document; tests compare both judges on the same documents.

Two rules JSON Schema cannot say are written in the descriptions: ``provenance_hash`` is the
sha256 of ``content``, and a task's ``object_id`` equals its ``task_path`` (and a retry's ``cap``
is not below its ``backoff``). A component of ``vault_path`` holds at most 255 UTF-8 bytes: the
pattern allows 255 ASCII characters or 63 of any kind, the part of that rule a pattern can hold
without ever accepting a path the server refuses.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from inbox.ids import ID_PATTERN, WHITESPACE
from inbox.jobtypes import (
    COMMON_FIELDS,
    MAX_VAULT_COMPONENT_BYTES,
    MAX_VAULT_PATH,
    QUEUE_NAME_RE,
    SHA256_RE,
    SUPPORTED_JOB_VERSIONS,
    TASK_PATH_RE,
    TEXT_LIMITS,
    JobType,
    registry,
    task_queues,
)
from inbox.retries import JITTER_RANGE, RETRIES_RANGE, SECONDS_RANGES
from inbox.runafter import RUN_AFTER_EXAMPLE, RUN_AFTER_PATTERN

# Text as every field holds it: no NUL anywhere, not blank (something ``str.isspace`` is not).
TEXT_PATTERN = rf"^[^\x00]*[^\x00{WHITESPACE}][^\x00]*$"
NO_NUL_PATTERN = r"^[^\x00]*$"
# The longest task path (``_check_task``).
MAX_TASK_PATH = 500
# Characters of any kind that fit a component's bytes whatever they are (4 bytes at most each).
_ANY_COMPONENT_CHARS = MAX_VAULT_COMPONENT_BYTES // 4
_COMPONENT = (
    r"(?!\.\.?(?:/|$))"  # neither "." nor ".."
    rf"(?:[\x01-\x2e\x30-\x5b\x5d-\x7f]{{1,{MAX_VAULT_COMPONENT_BYTES}}}"
    rf"|[^/\\\x00]{{1,{_ANY_COMPONENT_CHARS}}})"
)
# Relative, normalised (no empty, "." or ".." component), no backslash or NUL, not blank, at most
# MAX_VAULT_PATH characters. The length is a lookahead, not maxLength: a schema-driven client
# (schemathesis) that must draw a path of exactly that many characters from components
# searches for a minute; one it need not reach is drawn at once.
VAULT_PATH_PATTERN = (
    rf"^(?=[\s\S]{{1,{MAX_VAULT_PATH}}}$)(?=[\s\S]*[^{WHITESPACE}])"
    rf"{_COMPONENT}(?:/{_COMPONENT})*$"
)


def json_value_schema(ref: str) -> dict[str, Any]:
    """A JSON value whose text (values and keys) holds no NUL; ``ref`` points back at it."""
    return {
        "anyOf": [
            {"type": ["null", "boolean", "number"]},
            {"type": "string", "pattern": NO_NUL_PATTERN},
            {"type": "array", "items": {"$ref": ref}},
            {
                "type": "object",
                "propertyNames": {"pattern": NO_NUL_PATTERN},
                "additionalProperties": {"$ref": ref},
            },
        ]
    }


def text(max_length: int | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "minLength": 1, "pattern": TEXT_PATTERN}
    if max_length is not None:
        schema["maxLength"] = max_length
    return {**schema, **extra}


def _number_range(low: float, high: float, *, kind: str = "number") -> dict[str, Any]:
    return {"type": kind, "minimum": low, "maximum": high}


def retry_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "Retries of a failed attempt; cap must not be below backoff.",
        "required": ["retries"],
        "additionalProperties": False,
        "properties": {
            "retries": _number_range(*RETRIES_RANGE, kind="integer"),
            **{key: _number_range(*bounds) for key, bounds in SECONDS_RANGES.items()},
            "jitter": _number_range(*JITTER_RANGE),
        },
    }


def _version_schema() -> dict[str, Any]:
    versions = sorted(SUPPORTED_JOB_VERSIONS)
    if versions == list(range(versions[0], versions[-1] + 1)):
        return _number_range(versions[0], versions[-1], kind="integer")
    return {"type": "integer", "enum": versions}


def _common(job_type: JobType) -> dict[str, dict[str, Any]]:
    fields: dict[str, dict[str, Any]] = {
        "job_id": {"type": "string", "pattern": ID_PATTERN},
        "job_version": _version_schema(),
        "job_type": {"type": "string", "const": job_type.name},
        "vault_path": {
            "type": "string",
            "pattern": VAULT_PATH_PATTERN,
            "description": f"Relative and normalised, at most {MAX_VAULT_PATH} characters; each "
            f"component at most {MAX_VAULT_COMPONENT_BYTES} bytes of UTF-8.",
        },
        "run_after": {
            "type": "string",
            "pattern": RUN_AFTER_PATTERN,
            "description": "Not claimed before this time (RFC 3339 with a zone).",
            "examples": [RUN_AFTER_EXAMPLE],
        },
    }
    for name in COMMON_FIELDS.keys() - fields.keys():
        fields[name] = text(TEXT_LIMITS.get(name))
    if not job_type.uses_vault:
        fields["vault_path"] = {"type": "string", "const": "", "description": "No vault object."}
    return fields


def _task_fields(job_type: JobType, ref: str) -> dict[str, dict[str, Any]]:
    fields = {
        "task_path": {
            "type": "string",
            "maxLength": MAX_TASK_PATH,
            "pattern": TASK_PATH_RE.pattern,
            "description": "The task function (module.function); object_id must equal it.",
        },
        "args": {"type": "array", "items": {"$ref": ref}},
        "kwargs": {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL_PATTERN},
            "additionalProperties": {"$ref": ref},
        },
        "queue_name": {
            "type": "string",
            "enum": sorted(q for q in task_queues() if QUEUE_NAME_RE.fullmatch(q)),
        },
        "backend": text(),
    }
    if "retry" in job_type.optional:
        fields["retry"] = retry_schema()
    return fields


# The schema of each field a settings-defined type declares, by its type name.
_PLAIN = {
    "str": text,
    "int": lambda: {"type": "integer"},
    "bool": lambda: {"type": "boolean"},
    "list": lambda: {"type": "array"},
    "dict": lambda: {"type": "object"},
}
_HASH = {"type": "string", "pattern": SHA256_RE.pattern}
# Fields of the built-in types whose values have rules of their own.
_KNOWN = {
    "provenance_hash": {**_HASH, "description": "The sha256 (lowercase hex) of content."},
    "expected_provenance_hash": {**_HASH, "description": "The sha256 the object must have."},
}


def _type_fields(job_type: JobType, json_ref: str) -> dict[str, dict[str, Any]]:
    if job_type.scope_field == "queue_name":
        return _task_fields(job_type, json_ref)
    fields = {}
    for name, tname in {**job_type.required, **job_type.optional}.items():
        fields[name] = dict(_KNOWN[name]) if name in _KNOWN else _PLAIN[tname]()
        if name in TEXT_LIMITS:
            fields[name]["maxLength"] = TEXT_LIMITS[name]
    if "content" in fields and job_type.name == "SAVE_OBJECT":
        limit = settings.INBOX_MAX_CONTENT_BYTES
        fields["content"]["maxLength"] = limit
        fields["content"]["description"] = f"At most {limit:,} bytes of UTF-8."
    return fields


def document_schema(job_type: JobType, *, json_ref: str) -> dict[str, Any]:
    """The JSON Schema of a document of ``job_type``: every field, required or not, nothing
    else. ``json_ref`` points at ``json_value_schema`` (a task's arguments)."""
    required = set(COMMON_FIELDS) | set(job_type.required)
    if not job_type.uses_vault:
        required.discard("vault_path")
    return {
        "type": "object",
        "title": job_type.name,
        "required": sorted(required),
        "properties": {**_common(job_type), **_type_fields(job_type, json_ref)},
        "additionalProperties": False,
    }


def document_schemas(*, json_ref: str) -> dict[str, dict[str, Any]]:
    """A schema per job type a document can be valid for (a task type only with a task queue:
    without one no task document can be stored)."""
    out = {}
    for name, job_type in sorted(registry().items()):
        schema = document_schema(job_type, json_ref=json_ref)
        if schema["properties"].get("queue_name", {}).get("enum") == []:
            continue
        out[name] = schema
    return out
