"""The job-document JSON Schema (``inbox.docschema``) and the validator give the same verdict:
on every valid document of every type, and on each way of breaking one. The patterns the schema
shares with the validator say the same as the validator's own rule, checked character by
character and day by day."""

from __future__ import annotations

import datetime as dt
import re
import sys
from typing import Any

import jsonschema_rs
import pytest

from inbox.docschema import TEXT_PATTERN, VAULT_PATH_PATTERN, document_schemas
from inbox.errors import JobValidationError
from inbox.ids import WHITESPACE
from inbox.jobtypes import check_vault_path, sha256_hex, validate_job_document
from inbox.runafter import RUN_AFTER_PATTERN, run_after_problems
from tests.factories import delete_doc, noop_doc, save_doc
from tests.tasks.test_documents import task_doc

JSON_REF = "#/$defs/JsonValue"


def _validator() -> Any:
    from inbox.docschema import json_value_schema

    schema = {
        "$defs": {"JsonValue": json_value_schema(JSON_REF)},
        "oneOf": list(document_schemas(json_ref=JSON_REF).values()),
    }
    return jsonschema_rs.validator_for(schema)


def _server_accepts(doc: Any) -> bool:
    try:
        validate_job_document(doc)
    except JobValidationError:
        return False
    return True


VALID = {
    "save": save_doc(uid="s1"),
    "save-unicode": save_doc(uid="s2", content="é ✓ 🚀", vault_path="é/ü/🚀.md"),
    "save-run-after": save_doc(uid="s3", run_after="2030-06-01T10:30:00.5+02:00"),
    "delete": delete_doc(uid="d1", expected_commit="c0ffee"),
    "noop": noop_doc(uid="n1"),
    "noop-whole-float-version": noop_doc(uid="n2", job_version=1.0),
    "task": task_doc(retry={"retries": 3, "backoff": 0.5, "cap": 60}, backend="default"),
    "task-nested-args": task_doc(args=[{"a": [1, 2.5, None, True, "x"]}], kwargs={"k": {}}),
    "task-whole-float-retries": task_doc(retry={"retries": 2.0}),
    "task-non-idempotent": task_doc(job_type="TASK_NON_IDEMPOTENT"),
    "task-empty-vault-path": task_doc(vault_path=""),
    "id-with-slashes": noop_doc(job_id="a/b/c", object_id="x"),
    "long-ascii-component": noop_doc(vault_path="a" * 255),
}

BROKEN: dict[str, tuple[str, dict[str, Any]]] = {
    "unknown field": ("noop", {"surprise": 1}),
    "blank mission": ("noop", {"mission_id": " \u3000"}),
    "blank after Python's own spaces": ("noop", {"mission_id": "\x1c\x1f\x85"}),
    "NUL in text": ("save", {"source_commit": "a\x00b"}),
    "version 2": ("noop", {"job_version": 2}),
    "version true": ("noop", {"job_version": True}),
    "version 1.5": ("noop", {"job_version": 1.5}),
    "version as text": ("noop", {"job_version": "1"}),
    "mission too long": ("noop", {"mission_id": "m" * 201}),
    "object id too long": ("noop", {"object_id": "o" * 501}),
    "key too long": ("noop", {"idempotency_key": "k" * 256}),
    "delete request id too long": ("delete", {"delete_request_id": "r" * 201}),
    "id with newline": ("noop", {"job_id": "a\n"}),
    "id with dot segment": ("noop", {"job_id": "a/../b"}),
    "id blank": ("noop", {"job_id": "   "}),
    "absolute path": ("noop", {"vault_path": "/etc/passwd"}),
    "path with dot-dot": ("noop", {"vault_path": "a/../b"}),
    "path not normal": ("noop", {"vault_path": "a//b"}),
    "path trailing slash": ("noop", {"vault_path": "a/"}),
    "path backslash": ("noop", {"vault_path": "a\\b"}),
    "component over 255 bytes": ("noop", {"vault_path": "é" * 128}),
    "path over 1024": ("noop", {"vault_path": "/".join(["a" * 200] * 6)}),
    "hash not hex": ("delete", {"expected_provenance_hash": "Z" * 64}),
    "hash with a final newline": ("delete", {"expected_provenance_hash": "a" * 64 + "\n"}),
    "run_after without zone": ("noop", {"run_after": "2030-06-01T08:30:00"}),
    "run_after with a space": ("noop", {"run_after": "2030-06-01 08:30:00Z"}),
    "run_after on 30 February": ("noop", {"run_after": "2030-02-30T08:30:00Z"}),
    "run_after as a number": ("noop", {"run_after": 1_900_000_000}),
    "missing field": ("save", {"content": None}),
    "task path with a final newline": ("task", {"task_path": "a.b\n", "object_id": "a.b\n"}),
    "task unknown queue": ("task", {"queue_name": "mail"}),
    "task NUL in an argument key": ("task", {"kwargs": {"a\x00": 1}}),
    "task vault path": ("task", {"vault_path": "x"}),
    "task retry without retries": ("task", {"retry": {"backoff": 1}}),
    "task retry unknown key": ("task", {"retry": {"retries": 1, "often": True}}),
    "retry on a non-idempotent task": ("task-non-idempotent", {"retry": {"retries": 1}}),
    "not an object": ("noop", {}),
}


def _broken(base: str, changes: dict[str, Any]) -> Any:
    if not changes:
        return ["a list is not a document"]
    doc = {**VALID[base], **changes}
    return {k: v for k, v in doc.items() if v is not None}


@pytest.mark.parametrize("name", VALID)
def test_valid_document_is_valid_for_both(name: str) -> None:
    doc = VALID[name]
    assert _server_accepts(doc)
    assert _validator().is_valid(doc), list(_validator().iter_errors(doc))


@pytest.mark.parametrize("name", BROKEN)
def test_broken_document_is_refused_by_both(name: str) -> None:
    doc = _broken(*BROKEN[name])
    assert not _server_accepts(doc)
    assert not _validator().is_valid(doc)


def test_a_save_whose_hash_is_not_its_content_is_refused_though_the_schema_cannot_tell() -> None:
    # One of the rules the schema states in words (its description) instead of JSON Schema.
    doc = save_doc(content="one", provenance_hash=sha256_hex("other"))
    assert _validator().is_valid(doc) and not _server_accepts(doc)


def test_whitespace_is_exactly_what_python_calls_space() -> None:
    spaces = re.compile(f"[{WHITESPACE}]")
    assert all(bool(spaces.match(chr(c))) == chr(c).isspace() for c in range(sys.maxunicode + 1))
    blank_free = jsonschema_rs.validator_for({"type": "string", "pattern": TEXT_PATTERN})
    for c in range(0x3100):  # every space is below U+3100
        assert blank_free.is_valid(chr(c)) == (c != 0 and not chr(c).isspace()), hex(c)


@pytest.mark.parametrize("year", [1900, 2000, 2023, 2024, 2100, 2400, 2, 9998])
def test_run_after_pattern_takes_exactly_the_real_days(year: int) -> None:
    schema = jsonschema_rs.validator_for({"type": "string", "pattern": RUN_AFTER_PATTERN})
    for month in range(0, 14):
        for day in range(0, 33):
            value = f"{year:04d}-{month:02d}-{day:02d}T08:30:00Z"
            try:
                dt.date(year, month, day)
                real = True
            except ValueError:
                real = False
            assert schema.is_valid(value) == real == (run_after_problems(value) == []), value


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("2030-06-01T08:30Z", True),
        ("2030-06-01T08:30:00.123456-00:00", True),
        ("2030-06-01T08:30:00+05:30:15", True),
        ("2030-06-01T08:30:00.1234567Z", False),
        ("2030-06-01T08:30:00,5Z", False),
        ("2030-06-01t08:30:00z", False),
        ("2030-06-01T24:00:00Z", False),
        ("2030-06-01T08Z", False),
        ("20300601T083000Z", False),
        ("0001-01-01T00:00:00+01:00", False),
        ("9999-12-31T23:59:59-01:00", False),
        ("2030-06-01T08:30:00Z\n", False),
    ],
)
def test_run_after_pattern_and_rule_agree(value: str, accepted: bool) -> None:
    schema = jsonschema_rs.validator_for({"type": "string", "pattern": RUN_AFTER_PATTERN})
    assert schema.is_valid(value) == accepted
    assert (run_after_problems(value) == []) == accepted


@pytest.mark.parametrize(
    "path",
    ["a", "a/b.md", "é" * 63, "a" * 255, ".hidden/x", "a..b", "a b/c", "x" * 64 + "é"],
)
def test_vault_paths_the_pattern_accepts_the_server_accepts(path: str) -> None:
    schema = jsonschema_rs.validator_for({"type": "string", "pattern": VAULT_PATH_PATTERN})
    assert check_vault_path(path) == []
    # A component of 64 to 255 characters with one not ASCII may fit 255 bytes or not: the
    # pattern leaves them all out rather than ever accepting one the server refuses.
    assert schema.is_valid(path) == (path != "x" * 64 + "é")
