"""Bad job documents through ``create_job`` and through ``manage.py enqueue``:
every problem is listed at once and nothing is stored — no job, no event."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from audit.models import AuditEvent
from inbox.errors import JobValidationError
from inbox.jobtypes import validate_job_document
from inbox.models import Job
from inbox.transitions import create_job
from tests.factories import PRODUCER, delete_doc, noop_doc, save_doc

pytestmark = pytest.mark.django_db


def _without(name: str) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        doc = save_doc()
        del doc[name]
        return doc

    return make


# name → (a bad document, a fragment every refusal of it must contain)
BAD: dict[str, tuple[Callable[[], Any], str]] = {
    "unknown field": (lambda: save_doc(colour="red"), "colour: unknown field"),
    "missing field": (_without("object_id"), "object_id: missing"),
    "missing type-specific field": (_without("content"), "content: missing"),
    "str for int": (lambda: save_doc(job_version="1"), "job_version: must be int, got str"),
    "bool for int": (lambda: save_doc(job_version=True), "job_version: must be int, got boolean"),
    # (1.0 is the whole number 1: JSON, and JSON Schema's "integer", have one kind of number.)
    "float for int": (lambda: save_doc(job_version=1.5), "job_version: must be int, got float"),
    "int for str": (lambda: save_doc(object_id=17), "object_id: must be str, got int"),
    "list for str": (lambda: save_doc(mission_id=["m"]), "mission_id: must be str, got list"),
    "blank str": (lambda: save_doc(mission_id="  "), "mission_id: must not be empty"),
    "empty str": (lambda: save_doc(mission_id=""), "mission_id: must not be empty"),
    "Unicode-blank str": (
        lambda: save_doc(mission_id="\u2003\u00a0\u3000"),
        "mission_id: must not be empty",
    ),
    "unknown job_type": (lambda: save_doc(job_type="EXPLODE"), "job_type: 'EXPLODE' is not a"),
    "unknown job_version": (lambda: save_doc(job_version=2), "job_version: 2 is not supported"),
    "absolute vault_path": (lambda: save_doc(vault_path="/etc/passwd"), "must be relative"),
    "dotdot vault_path": (lambda: save_doc(vault_path="notes/../../x.md"), "must not contain '..'"),
    "backslash vault_path": (lambda: save_doc(vault_path="notes\\x.md"), "backslashes"),
    "NUL vault_path": (lambda: save_doc(vault_path="notes/x\x00.md"), "must not contain NUL"),
    "long vault_path": (lambda: save_doc(vault_path="n" * 1025), "1025 characters is over 1024"),
    "double slash vault_path": (lambda: save_doc(vault_path="notes//x.md"), "must be normalised"),
    "dot vault_path": (lambda: save_doc(vault_path="./notes/x.md"), "must be normalised"),
    "trailing slash vault_path": (lambda: save_doc(vault_path="notes/x/"), "must be normalised"),
    "empty vault_path": (lambda: save_doc(vault_path=""), "vault_path: must not be empty"),
    "content over limit": (lambda: save_doc(content="x" * 65), "65 bytes is over the limit of 64"),
    "provenance_hash not sha256(content)": (
        lambda: save_doc(provenance_hash="0" * 64),
        "provenance_hash: does not equal sha256 of content",
    ),
    "provenance_hash not hex": (lambda: save_doc(provenance_hash="abc"), "64 lowercase hex"),
    "approval_id from a producer": (
        lambda: delete_doc(approval_id="appr-forged"),
        "approval_id: unknown field (attached by an approval",
    ),
    "NUL in another text field": (lambda: noop_doc(object_id="a\x00b"), "object_id: must not"),
    "NUL in content": (lambda: save_doc(content="a\x00b"), "content: must not contain NUL"),
    "NUL in non-ASCII text": (
        lambda: noop_doc(object_id="é\x00"),
        "object_id: must not contain NUL",
    ),
    "lone surrogate in a common field": (
        lambda: noop_doc(mission_id="m\udfff"),
        "mission_id: must be valid Unicode",
    ),
    "lone surrogate in content": (
        lambda: save_doc(content="\ud800", provenance_hash="0" * 64),
        "content: must be valid Unicode",
    ),
    "not an object": (lambda: [save_doc()], "must be a JSON object, got list"),
}


@pytest.fixture(autouse=True)
def _small_content_limit(settings):
    settings.INBOX_MAX_CONTENT_BYTES = 64


def _nothing_stored() -> None:
    assert Job.objects.count() == 0
    assert AuditEvent.objects.count() == 0


@pytest.mark.parametrize("case", list(BAD))
def test_create_job_bad_document_is_refused_and_stores_nothing(case):
    make, fragment = BAD[case]
    with pytest.raises(JobValidationError) as info:
        create_job(make(), requested_by=PRODUCER)
    assert any(fragment in problem for problem in info.value.problems), info.value.problems
    _nothing_stored()


def test_create_job_whole_number_written_with_a_fraction_is_stored_whole():
    job, _created = create_job(save_doc(job_version=1.0), requested_by=PRODUCER)
    stored = Job.objects.get(job_id=job.job_id)
    assert (stored.job_version, stored.payload["job_version"]) == (1, 1)
    assert type(stored.payload["job_version"]) is int


def test_create_job_content_at_limit_is_accepted():
    _job, created = create_job(save_doc(content="é" * 32), requested_by=PRODUCER)
    assert created


def test_create_job_lists_every_problem_at_once():
    doc = save_doc(colour="red", job_version=True, vault_path="/abs/../x", provenance_hash="0" * 64)
    del doc["mission_id"]
    with pytest.raises(JobValidationError) as info:
        create_job(doc, requested_by=PRODUCER)
    text = " | ".join(info.value.problems)
    for fragment in (
        "colour: unknown field",
        "mission_id: missing",
        "job_version: must be int, got boolean",
        "vault_path: must be relative",
        "vault_path: must not contain '..'",
        "provenance_hash: does not equal sha256",
    ):
        assert fragment in text
    _nothing_stored()


# --- manage.py enqueue ------------------------------------------------------------------------


def _enqueue(tmp_path: Path, lines: list[str]) -> tuple[int, str, str]:
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("enqueue", str(path), stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("case", list(BAD))
def test_enqueue_bad_line_is_refused_with_line_number_and_reason(tmp_path, case):
    make, fragment = BAD[case]
    code, out, err = _enqueue(tmp_path, [json.dumps(make())])
    assert code == 1
    assert "created 0, replayed 0, refused 1" in out
    assert err.startswith("line 1: refused: ")
    assert fragment in err
    _nothing_stored()


def test_enqueue_mixed_file_counts_and_reports_every_refusal(tmp_path):
    good, other = save_doc(), noop_doc()
    lines = [
        json.dumps(good),
        "{not json",
        "",
        json.dumps(save_doc(colour="red", vault_path="/abs")),
        json.dumps(good),  # a safe replay
        json.dumps(other),
        json.dumps(save_doc(job_id=good["job_id"])),  # same job_id, other key: conflict
    ]
    code, out, err = _enqueue(tmp_path, lines)
    assert code == 1
    assert out.strip() == "created 2, replayed 1, refused 3"
    refusals = err.strip().splitlines()
    assert len(refusals) == 3
    assert refusals[0].startswith("line 2: refused: not valid JSON")
    assert refusals[1].startswith("line 4: refused: ")
    assert "colour: unknown field" in refusals[1]
    assert "vault_path: must be relative" in refusals[1]
    assert refusals[2].startswith("line 7: refused: idempotency conflict")
    assert Job.objects.count() == 2
    assert AuditEvent.objects.count() == 4  # REQUESTED + READY for each created job


def test_enqueue_all_good_exits_zero(tmp_path):
    code, out, err = _enqueue(tmp_path, [json.dumps(save_doc()), json.dumps(noop_doc())])
    assert (code, out.strip(), err) == (0, "created 2, replayed 0, refused 0", "")


def test_enqueue_reads_stdin_in_a_real_process(proc_db):
    doc = save_doc()
    proc = proc_db.manage(
        "enqueue",
        "-",
        check=False,
        input=json.dumps(doc) + "\n" + json.dumps(doc) + "\n[1]\n",
    )
    assert proc.returncode == 1
    assert "created 1, replayed 1, refused 1" in proc.stdout
    assert "line 3: refused: the job must be a JSON object, got list" in proc.stderr
    assert proc_db.scalar("SELECT COUNT(*) FROM inbox_job") == 1
    assert proc_db.scalar("SELECT COUNT(*) FROM audit_auditevent") == 2


def test_enqueue_undecodable_and_too_deep_lines_are_refused_not_fatal(tmp_path):
    good = save_doc()
    path = tmp_path / "jobs.jsonl"
    path.write_bytes(
        b'{"job_id": "caf\xe9"}\n'  # Latin-1, not UTF-8
        + b"[" * 100_000
        + b"\n"
        + json.dumps(good).encode()
        + b"\n"
    )
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as info:
        call_command("enqueue", str(path), stdout=out, stderr=err)
    assert info.value.code == 1
    assert out.getvalue().strip() == "created 1, replayed 0, refused 2"
    assert err.getvalue().splitlines() == [
        "line 1: refused: not valid UTF-8 at byte 16",
        "line 2: refused: not valid JSON: nested too deeply",
    ]
    assert list(Job.objects.values_list("job_id", flat=True)) == [good["job_id"]]


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.from_type(type(None)), st.integers(), st.booleans(), st.floats()))
def test_a_fields_problems_are_exactly_what_its_value_has(value):
    """The validator's quick acceptance of ordinary values finds every problem the full checks
    would: the problems named for one field follow from its value alone (an oracle written
    from the rules, not from the code)."""
    expected: set[str] = set()
    if not isinstance(value, str):
        expected.add(f"mission_id: must be str, got {_json_type(value)}")
    else:
        if not value.strip():
            expected.add("mission_id: must not be empty")
        if "\x00" in value:
            expected.add("mission_id: must not contain NUL")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            expected.add("mission_id: must be valid Unicode text (it holds a lone surrogate)")
        if len(value) > 200:
            expected.add("mission_id: longer than 200 characters")
    try:
        validate_job_document(noop_doc(mission_id=value))
        problems: set[str] = set()
    except JobValidationError as exc:
        problems = set(exc.problems)
    assert {p for p in problems if p.startswith("mission_id:")} == expected


def _json_type(value: Any) -> str:
    return "boolean" if isinstance(value, bool) else type(value).__name__
