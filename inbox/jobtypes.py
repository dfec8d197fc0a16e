"""The job-type registry and the job-document schema (DESIGN §1.2, §1.8).

Built-in types are SAVE_OBJECT, DELETE_OBJECT and NOOP. More can be added from settings
(``INBOX_JOB_TYPES``) without touching this module::

    INBOX_JOB_TYPES = {
        "TOUCH_OBJECT": {
            "scope": "save", "idempotent": True, "handler": "myapp.handlers.touch",
            "required": {"stamp": "str"}, "optional": {}, "needs_approval": False,
        },
    }

``validate_job_document`` lists every problem of a document at once and never stores anything.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from inbox.errors import ConfigurationError, JobValidationError

SUPPORTED_JOB_VERSIONS = frozenset({1})
MAX_VAULT_PATH = 1024
# The longest file or directory name the usual filesystems hold (NAME_MAX), in UTF-8 bytes.
MAX_VAULT_COMPONENT_BYTES = 255
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")

# Field type names used by schemas (settings use the names, not Python types).
_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,)}

# Every document carries these; their values are checked by ``_check_common``.
COMMON_FIELDS: dict[str, str] = {
    "job_id": "str",
    "job_version": "int",
    "mission_id": "str",
    "job_type": "str",
    "object_id": "str",
    "vault_path": "str",
    "idempotency_key": "str",
}

# Fields sealed into the fingerprint (DESIGN §1.5). The first five are columns.
IMMUTABLE_COLUMNS = ("job_type", "object_id", "vault_path", "mission_id", "approval_id")
IMMUTABLE_PAYLOAD_FIELDS = (
    "expected_commit",
    "expected_provenance_hash",
    "delete_request_id",
    "source_commit",
    "provenance_hash",
)


@dataclass(frozen=True)
class JobType:
    name: str
    scope: str
    idempotent: bool
    handler_path: str
    required: Mapping[str, str] = field(default_factory=dict)
    optional: Mapping[str, str] = field(default_factory=dict)
    needs_approval: bool = False
    max_attempts: int | None = None
    extra_checks: tuple[Callable[[dict[str, Any]], list[str]], ...] = ()

    @property
    def handler(self) -> Callable[..., Any]:
        return import_string(self.handler_path)

    def allowed_fields(self) -> set[str]:
        return set(COMMON_FIELDS) | set(self.required) | set(self.optional)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_save(doc: dict[str, Any]) -> list[str]:
    problems = []
    content = doc.get("content")
    if isinstance(content, str):
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError:
            return problems  # reported by _text_problems; no size or hash to speak of
        limit = settings.INBOX_MAX_CONTENT_BYTES
        if size > limit:
            problems.append(f"content: {size} bytes is over the limit of {limit} bytes")
        declared = doc.get("provenance_hash")
        if isinstance(declared, str) and SHA256_RE.match(declared):
            if declared != sha256_hex(content):
                problems.append("provenance_hash: does not equal sha256 of content")
    return problems


def _check_hashes(doc: dict[str, Any]) -> list[str]:
    problems = []
    for name in ("provenance_hash", "expected_provenance_hash"):
        value = doc.get(name)
        if isinstance(value, str) and not SHA256_RE.match(value):
            problems.append(f"{name}: must be 64 lowercase hex characters (sha256)")
    return problems


BUILTIN_TYPES: tuple[JobType, ...] = (
    JobType(
        name="SAVE_OBJECT",
        scope="save",
        idempotent=True,
        handler_path="inbox.handlers.save_object",
        required={"content": "str", "provenance_hash": "str"},
        optional={"source_commit": "str"},
        extra_checks=(_check_hashes, _check_save),
    ),
    JobType(
        name="DELETE_OBJECT",
        scope="delete",
        idempotent=False,
        handler_path="inbox.handlers.delete_object",
        required={"delete_request_id": "str", "expected_provenance_hash": "str"},
        optional={"expected_commit": "str"},
        needs_approval=True,
        extra_checks=(_check_hashes,),
    ),
    JobType(
        name="NOOP",
        scope="noop",
        idempotent=True,
        handler_path="inbox.handlers.noop",
    ),
)


def _from_settings(name: str, spec: Mapping[str, Any]) -> JobType:
    known = {"scope", "idempotent", "handler", "required", "optional", "needs_approval"}
    known.add("max_attempts")
    unknown = set(spec) - known
    if unknown or not {"scope", "idempotent", "handler"} <= set(spec):
        raise ConfigurationError(
            f"INBOX_JOB_TYPES[{name!r}] needs scope, idempotent and handler"
            + (f"; unknown keys: {', '.join(sorted(unknown))}" if unknown else "")
        )
    for group in ("required", "optional"):
        for fname, tname in spec.get(group, {}).items():
            if tname not in _TYPES:
                raise ConfigurationError(
                    f"INBOX_JOB_TYPES[{name!r}][{group!r}][{fname!r}]: type {tname!r} is not "
                    f"one of {', '.join(_TYPES)}"
                )
    max_attempts = spec.get("max_attempts")
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        # 0 would fail a job at its first lapsed lease (and "or" would quietly replace it).
        raise ConfigurationError(
            f"INBOX_JOB_TYPES[{name!r}]['max_attempts'] must be a whole number of at least 1, "
            f"got {max_attempts!r}"
        )
    return JobType(
        name=name,
        scope=str(spec["scope"]),
        idempotent=bool(spec["idempotent"]),
        handler_path=str(spec["handler"]),
        required=dict(spec.get("required", {})),
        optional=dict(spec.get("optional", {})),
        needs_approval=bool(spec.get("needs_approval", False)),
        max_attempts=max_attempts,
    )


@cache
def registry() -> dict[str, JobType]:
    """Built-in types plus those from ``settings.INBOX_JOB_TYPES`` (cached per process)."""
    types = {t.name: t for t in BUILTIN_TYPES}
    for name, spec in getattr(settings, "INBOX_JOB_TYPES", {}).items():
        if name in types:
            raise ConfigurationError(f"INBOX_JOB_TYPES: {name!r} would replace a built-in type")
        types[name] = _from_settings(name, spec)
    return types


def get_job_type(name: str) -> JobType:
    try:
        return registry()[name]
    except KeyError:
        raise ConfigurationError(f"unknown job type {name!r}") from None


def scopes() -> list[str]:
    return sorted({t.scope for t in registry().values()})


def check_vault_path(value: str) -> list[str]:
    """Problems with a vault path as text; resolution inside the root is the vault's check."""
    problems = []
    if not value:
        return ["vault_path: must not be empty"]
    if len(value) > MAX_VAULT_PATH:
        problems.append(f"vault_path: {len(value)} characters is over {MAX_VAULT_PATH}")
    if "\x00" in value:
        problems.append("vault_path: must not contain NUL")
    if "\\" in value:
        problems.append("vault_path: must not contain backslashes")
    if value.startswith("/"):
        problems.append("vault_path: must be relative, not absolute")
    parts = value.split("/")
    if ".." in parts:
        problems.append("vault_path: must not contain '..'")
    for part in parts:
        # surrogatepass: a lone surrogate is reported elsewhere; here only the length counts.
        size = len(part.encode("utf-8", "surrogatepass"))
        if size > MAX_VAULT_COMPONENT_BYTES:
            problems.append(
                f"vault_path: the component {part[:40]!r}… is {size} bytes (UTF-8); a file or "
                f"directory name holds at most {MAX_VAULT_COMPONENT_BYTES}"
            )
    if not problems and (posixpath.normpath(value) != value or "." in parts):
        problems.append(
            f"vault_path: must be normalised (got {value!r}, normal form "
            f"{posixpath.normpath(value)!r})"
        )
    return problems


def _type_problem(name: str, value: Any, tname: str) -> str | None:
    expected = _TYPES[tname]
    # bool is an int in Python; a JSON true is not a job_version.
    if isinstance(value, bool) and bool not in expected:
        return f"{name}: must be {tname}, got boolean"
    if not isinstance(value, expected):
        return f"{name}: must be {tname}, got {type(value).__name__}"
    if tname == "str" and not value.strip():
        return f"{name}: must not be empty"
    return None


def _text_problems(name: str, value: str) -> list[str]:
    """Text both databases can store: PostgreSQL refuses NUL, UTF-8 refuses lone surrogates."""
    problems = []
    if "\x00" in value and name != "vault_path":  # check_vault_path reports the path's NUL
        problems.append(f"{name}: must not contain NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        problems.append(f"{name}: must be valid Unicode text (it holds a lone surrogate)")
    return problems


def validate_job_document(data: Any) -> tuple[JobType, dict[str, Any]]:
    """Return (job type, the validated document) or raise ``JobValidationError`` listing all."""
    if not isinstance(data, dict):
        raise JobValidationError([f"the job must be a JSON object, got {type(data).__name__}"])
    problems: list[str] = []
    job_type: JobType | None = None
    type_name = data.get("job_type")
    if "job_type" in data:
        if isinstance(type_name, str) and type_name in registry():
            job_type = registry()[type_name]
        else:
            known = ", ".join(sorted(registry()))
            problems.append(f"job_type: {type_name!r} is not a known job type ({known})")

    schema = dict(COMMON_FIELDS)
    if job_type:
        schema.update(job_type.required)
    for name, tname in schema.items():
        if name not in data:
            problems.append(f"{name}: missing")
        elif (msg := _type_problem(name, data[name], tname)) is not None:
            if name != "job_type":  # already reported above
                problems.append(msg)
    if job_type:
        for name, tname in job_type.optional.items():
            if name in data and (msg := _type_problem(name, data[name], tname)) is not None:
                problems.append(msg)
        unknown = sorted(set(data) - job_type.allowed_fields())
        for name in unknown:
            hint = " (attached by an approval, not sent by producers)"
            problems.append(f"{name}: unknown field" + (hint if name == "approval_id" else ""))

    for name, value in data.items():
        if isinstance(value, str):
            problems.extend(_text_problems(name, value))

    version = data.get("job_version")
    if isinstance(version, int) and not isinstance(version, bool):
        if version not in SUPPORTED_JOB_VERSIONS:
            supported = ", ".join(map(str, sorted(SUPPORTED_JOB_VERSIONS)))
            problems.append(f"job_version: {version} is not supported (supported: {supported})")
    path = data.get("vault_path")
    if isinstance(path, str):
        problems.extend(check_vault_path(path))
    for name, limit in (("job_id", 200), ("mission_id", 200), ("object_id", 500)):
        value = data.get(name)
        if isinstance(value, str) and len(value) > limit:
            problems.append(f"{name}: longer than {limit} characters")
    key = data.get("idempotency_key")
    if isinstance(key, str) and len(key) > 255:
        problems.append("idempotency_key: longer than 255 characters")
    if job_type:
        for check in job_type.extra_checks:
            problems.extend(check(data))
    if problems:
        raise JobValidationError(problems)
    assert job_type is not None
    return job_type, dict(data)


def fingerprint_values(*, columns: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    values = {name: columns.get(name) for name in IMMUTABLE_COLUMNS}
    values.update({name: payload.get(name) for name in IMMUTABLE_PAYLOAD_FIELDS})
    return values


def compute_fingerprint(*, columns: Mapping[str, Any], payload: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the immutable fields (DESIGN §1.5)."""
    canonical = json.dumps(
        fingerprint_values(columns=columns, payload=payload),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
