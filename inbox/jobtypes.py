"""The job-type registry and the job-document schema: what a producer may send, per type.

Built-in types are SAVE_OBJECT, DELETE_OBJECT, NOOP and the two task types (``TASK`` and
``TASK_NON_IDEMPOTENT``: a ``django.tasks`` function enqueued through
``inbox.tasks.InboxTaskBackend``; the job's scope is the task's queue). More can be added from
settings (``INBOX_JOB_TYPES``) without touching this module::

    INBOX_JOB_TYPES = {
        "TOUCH_OBJECT": {
            "scope": "save", "idempotent": True, "handler": "myapp.handlers.touch",
            "required": {"stamp": "str"}, "optional": {}, "needs_approval": False,
        },
    }

``validate_job_document`` lists every problem of a document at once and never stores anything.
"""

from __future__ import annotations

import functools
import hashlib
import math
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from inbox.errors import ConfigurationError, JobValidationError
from inbox.fingerprint import (
    _FINGERPRINT_NAMES as _FINGERPRINT_NAMES,
)
from inbox.fingerprint import (
    IMMUTABLE_COLUMNS as IMMUTABLE_COLUMNS,
)
from inbox.fingerprint import (
    IMMUTABLE_PAYLOAD_FIELDS as IMMUTABLE_PAYLOAD_FIELDS,
)
from inbox.fingerprint import (
    _fingerprint_of_text as _fingerprint_of_text,
)
from inbox.fingerprint import (
    compute_fingerprint as compute_fingerprint,
)
from inbox.fingerprint import (
    fingerprint_from as fingerprint_from,
)
from inbox.fingerprint import (
    fingerprint_values as fingerprint_values,
)
from inbox.ids import id_problems
from inbox.retries import RetryPolicy as RetryPolicy
from inbox.retries import asdict_of as asdict_of
from inbox.retries import retry_delay as retry_delay
from inbox.runafter import parse_run_after as parse_run_after
from inbox.runafter import run_after_problems

SUPPORTED_JOB_VERSIONS = frozenset({1})
MAX_VAULT_PATH = 1024
# The longest file or directory name the usual filesystems hold (NAME_MAX), in UTF-8 bytes.
MAX_VAULT_COMPONENT_BYTES = 255
# Matched with ``fullmatch`` wherever they are used: Python's "$" also accepts a final newline,
# JSON Schema's (the API's schema says the same patterns) does not.
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# The longest text a field may hold, in characters (the columns' widths).
# (``job_id``'s is part of the id rule, ``inbox.ids``.)
# ``delete_request_id``'s is the approval's column (an approval copies it).
TEXT_LIMITS = {
    "mission_id": 200,
    "object_id": 500,
    "idempotency_key": 255,
    "delete_request_id": 200,
}

# Field type names used by schemas (settings use the names, not Python types).
_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "list": (list,),
    "dict": (dict,),
}

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
# Any document may carry these. ``run_after`` (ISO 8601 with a zone): not claimed before it
# (a producer's scheduled job); it is not sealed into the fingerprint.
COMMON_OPTIONAL: dict[str, str] = {"run_after": "str"}


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
    # The job's scope is this document field instead of ``scope`` (a task: its queue name).
    scope_field: str | None = None
    # False: the type touches no vault object and its documents carry no ``vault_path``.
    uses_vault: bool = True

    @property
    def handler(self) -> Callable[..., Any]:
        return _handler_at(self.handler_path)

    def allowed_fields(self) -> set[str]:
        return set(self._allowed)

    @functools.cached_property
    def _allowed(self) -> frozenset[str]:
        # Kept on the instance (a frozen dataclass still has a __dict__): every executor
        # re-validates every job it claims against it.
        return (
            frozenset(COMMON_FIELDS)
            | set(COMMON_OPTIONAL)
            | set(self.required)
            | set(self.optional)
        )

    @functools.cached_property
    def _schema(self) -> tuple[tuple[str, str, type], ...]:
        """The fields every document of this type must carry: (name, type name, the exact
        Python type a JSON value of that type has), in ``validate_job_document``'s order."""
        schema = dict(COMMON_FIELDS)
        if not self.uses_vault:
            del schema["vault_path"]
        schema.update(self.required)
        return _typed_schema(schema)

    def scope_for(self, doc: Mapping[str, Any]) -> str:
        """The scope a validated document of this type is claimed from."""
        return str(doc[self.scope_field]) if self.scope_field else self.scope

    def max_attempts_for(self, doc: Mapping[str, Any]) -> int:
        """Attempts before a lapsed lease fails the job: the type's or the setting's, raised to
        cover every retry a retry policy declares."""
        base = self.max_attempts or settings.INBOX_MAX_ATTEMPTS
        policy = RetryPolicy.of(doc) if self.idempotent else None
        return max(base, policy.retries + 1) if policy else base


@functools.cache
def _handler_at(path: str) -> Callable[..., Any]:
    """The handler a dotted path names, imported once per process (an executor asks for it
    per job); a path that fails to import is not remembered and fails again next time."""
    return import_string(path)


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
        if isinstance(declared, str) and SHA256_RE.fullmatch(declared):
            if declared != sha256_hex(content):
                problems.append("provenance_hash: does not equal sha256 of content")
    return problems


def _check_hashes(doc: dict[str, Any]) -> list[str]:
    problems = []
    for name in ("provenance_hash", "expected_provenance_hash"):
        value = doc.get(name)
        if isinstance(value, str) and not SHA256_RE.fullmatch(value):
            problems.append(f"{name}: must be 64 lowercase hex characters (sha256)")
    return problems


# --- tasks (django.tasks through inbox.tasks.InboxTaskBackend) --------------------------------

TASK = "TASK"
TASK_NON_IDEMPOTENT = "TASK_NON_IDEMPOTENT"
TASK_TYPES = frozenset({TASK, TASK_NON_IDEMPOTENT})
# A queue name is an executor scope: a column of 32 characters and a command-line argument.
QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
# ASCII names: ``\w`` is Unicode in Python and ASCII in JSON Schema.
TASK_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_TASK_FIELDS = {"task_path": "str", "args": "list", "kwargs": "dict", "queue_name": "str"}
_INBOX_BACKEND = "inbox.tasks.InboxTaskBackend"


@cache
def _is_inbox_backend(path: str) -> bool:
    if path == _INBOX_BACKEND:
        return True
    try:
        backend = import_string(path)
        ours = import_string(_INBOX_BACKEND)
    except ImportError:
        return False  # Django's own task checks report a backend that does not import
    return isinstance(backend, type) and issubclass(backend, ours)


def task_queues() -> frozenset[str]:
    """The queues of every ``InboxTaskBackend`` in ``settings.TASKS``: each is an executor
    scope. Read each time (tests override ``TASKS``); a dict walk, no I/O."""
    queues: set[str] = set()
    for spec in getattr(settings, "TASKS", {}).values():
        if _is_inbox_backend(str(spec.get("BACKEND", ""))):
            queues.update(spec.get("QUEUES", ["default"]))
    return frozenset(queues)


def json_problems(name: str, value: Any, depth: int = 0) -> list[str]:
    """Why ``value`` would not survive a JSON round trip into both databases unchanged, or []:
    only str/int/float/bool/None, lists and objects with text keys; no NaN or infinity
    (PostgreSQL's jsonb refuses them), no NUL or lone surrogate in text."""
    if depth > 64:
        return [f"{name}: nested more than 64 levels deep"]
    if value is None or isinstance(value, bool | int):
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [f"{name}: {value} is not a JSON number"]
    if isinstance(value, str):
        return _text_problems(name, value)
    if isinstance(value, list):
        out: list[str] = []
        for i, item in enumerate(value):
            out += json_problems(f"{name}[{i}]", item, depth + 1)
            if len(out) >= 10:
                break
        return out
    if isinstance(value, dict):
        out = []
        for key, item in value.items():
            if not isinstance(key, str):
                out.append(f"{name}: key {key!r} is a {type(key).__name__}; JSON keys are text")
                continue
            out += _text_problems(f"{name} key {key!r}", key)
            out += json_problems(f"{name}[{key!r}]", item, depth + 1)
            if len(out) >= 10:
                break
        return out
    return [
        f"{name}: a {type(value).__name__} is not JSON (use str, int, float, bool, None, "
        "list or dict)"
    ]


def _check_task(doc: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    path = doc.get("task_path")
    if isinstance(path, str) and path:
        if len(path) > 500 or not TASK_PATH_RE.fullmatch(path):
            problems.append("task_path: must be a dotted path to a task (module.function)")
        elif doc.get("object_id") != path:
            # object_id is sealed: holding the path there seals which function runs.
            problems.append("object_id: must equal task_path")
    queue = doc.get("queue_name")
    if isinstance(queue, str) and queue:
        known = task_queues()
        if queue not in known:
            listed = ", ".join(sorted(known)) or "none: add InboxTaskBackend to TASKS"
            problems.append(f"queue_name: {queue!r} is not a queue of the task backend ({listed})")
        elif not QUEUE_NAME_RE.fullmatch(queue):
            problems.append(f"queue_name: {queue!r} is not a valid scope name")
    for name in ("args", "kwargs"):
        if isinstance(doc.get(name), list | dict):
            problems += json_problems(name, doc[name])
    retry = doc.get("retry")
    if retry is not None:
        if not isinstance(retry, dict):
            problems.append("retry: must be an object")
        else:
            problems += RetryPolicy.problems(retry)
    return problems


def _task_type(name: str, *, idempotent: bool) -> JobType:
    """A task type: its scope is the task's queue; only an idempotent task may be retried."""
    return JobType(
        name=name,
        scope="",
        scope_field="queue_name",
        idempotent=idempotent,
        handler_path="inbox.handlers.run_task",
        required=_TASK_FIELDS,
        optional={"backend": "str", "retry": "dict"} if idempotent else {"backend": "str"},
        uses_vault=False,
        extra_checks=(_check_task,),
    )


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
    _task_type(TASK, idempotent=True),
    # A task declared non-idempotent (``inbox.tasks.non_idempotent``) follows the DELETE rules:
    # never batched, never retried, OUTCOME_UNKNOWN after a lost lease, an operator decides.
    _task_type(TASK_NON_IDEMPOTENT, idempotent=False),
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
    """Every executor scope: the registered types' and the task backend's queues."""
    fixed = {t.scope for t in registry().values() if t.scope_field is None}
    return sorted(fixed | task_queues())


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


def _typed_schema(fields: Mapping[str, str]) -> tuple[tuple[str, str, type], ...]:
    """(name, type name, the exact Python type a JSON value of that type has) per field."""
    return tuple((name, tname, _TYPES[tname][0]) for name, tname in fields.items())


# A document whose type is unknown is still checked against the fields every type has.
_COMMON_SCHEMA = _typed_schema(COMMON_FIELDS)


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
    data = _whole_numbers(data, job_type)
    problems += _field_problems(data, job_type)
    problems += _value_problems(data, job_type)
    if problems:
        raise JobValidationError(problems)
    assert job_type is not None
    return job_type, dict(data)


def _whole(value: Any) -> bool:
    return type(value) is float and value.is_integer()


def _whole_numbers(data: dict[str, Any], job_type: JobType | None) -> dict[str, Any]:
    """``data`` with ``1.0`` as ``1`` wherever a whole number is expected: JSON has one kind of
    number (JSON Schema's "integer" is any number without a fraction), so a client may write
    either; the stored document holds the whole number, and both replay alike."""
    fields = {**COMMON_FIELDS, **(job_type.required if job_type else {})}
    fields.update(job_type.optional if job_type else {})
    whole = {n: int(data[n]) for n, t in fields.items() if t == "int" and _whole(data.get(n))}
    retry = data.get("retry")
    if isinstance(retry, dict) and _whole(retry.get("retries")):
        whole["retry"] = {**retry, "retries": int(retry["retries"])}
    return {**data, **whole} if whole else data


def _field_problems(data: dict[str, Any], job_type: JobType | None) -> list[str]:
    """Missing, unknown and mistyped fields (a document of unknown type: the common ones)."""
    problems: list[str] = []
    if job_type and not job_type.uses_vault:
        # No vault object: the path may be left out, and if sent it must be empty.
        if data.get("vault_path", "") != "":
            problems.append(f"vault_path: a {job_type.name} job touches no vault object")
    for name, tname, exact in job_type._schema if job_type else _COMMON_SCHEMA:
        if name not in data:
            problems.append(f"{name}: missing")
            continue
        value = data[name]
        # The usual value (a JSON value of exactly the type, text not blank) needs no more.
        if type(value) is exact and (exact is not str or (not value.isspace() and value)):
            continue
        if (msg := _type_problem(name, value, tname)) is not None:
            if name != "job_type":  # already reported by the caller
                problems.append(msg)
    optional = {**COMMON_OPTIONAL, **(job_type.optional if job_type else {})}
    for name, tname in optional.items():
        if name in data and (msg := _type_problem(name, data[name], tname)) is not None:
            problems.append(msg)
    if job_type and not data.keys() <= job_type._allowed:
        for name in sorted(data.keys() - job_type._allowed):
            hint = " (attached by an approval, not sent by producers)"
            problems.append(f"{name}: unknown field" + (hint if name == "approval_id" else ""))
    return problems


def _value_problems(data: dict[str, Any], job_type: JobType | None) -> list[str]:
    """What is wrong with the values themselves: text, ids, version, path, lengths, type rules."""
    problems: list[str] = []
    if "run_after" in data:
        problems.extend(run_after_problems(data["run_after"]))
    for name, value in data.items():
        # ASCII text without NUL has no problem to find (``isascii`` is a flag read).
        if isinstance(value, str) and not (value.isascii() and "\x00" not in value):
            problems.extend(_text_problems(name, value))
    if isinstance(job_id := data.get("job_id"), str):
        problems.extend(id_problems("job_id", job_id))
    version = data.get("job_version")
    if isinstance(version, int) and not isinstance(version, bool):
        if version not in SUPPORTED_JOB_VERSIONS:
            supported = ", ".join(map(str, sorted(SUPPORTED_JOB_VERSIONS)))
            problems.append(f"job_version: {version} is not supported (supported: {supported})")
    path = data.get("vault_path")
    if isinstance(path, str) and (job_type is None or job_type.uses_vault):
        problems.extend(check_vault_path(path))
    for name, limit in TEXT_LIMITS.items():
        value = data.get(name)
        if isinstance(value, str) and len(value) > limit:
            problems.append(f"{name}: longer than {limit} characters")
    if job_type:
        for check in job_type.extra_checks:
            problems.extend(check(data))
    return problems
