"""``enqueue`` refuses a hostile line and goes on with the rest of the file.

An integer literal longer than Python's int-to-string limit used to abort the whole run with a
traceback, no summary and the rest of the file unread.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.factories import save_doc

pytestmark = pytest.mark.django_db

HUGE_INT = "9" * (sys.get_int_max_str_digits() + 1)


def test_enqueue_overlong_integer_line_is_refused_and_the_rest_stored(proc_db):
    first, last = save_doc(), save_doc()
    lines = [
        json.dumps(first),
        '{"job_id": "huge", "job_version": ' + HUGE_INT + "}",
        json.dumps(save_doc(job_id="nul\u0000id")),
        json.dumps(save_doc(vault_path="notes/" + "n" * 256 + ".md")),
        json.dumps(last),
    ]
    proc = proc_db.manage("enqueue", "-", check=False, input="\n".join(lines) + "\n")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stdout.strip() == "created 2, replayed 0, refused 3"
    refusals = proc.stderr.strip().splitlines()
    assert refusals[0].startswith("line 2: refused: not valid JSON: Exceeds the limit")
    assert refusals[1] == "line 3: refused: job_id: must not contain NUL"
    assert refusals[2].startswith("line 4: refused: vault_path: the component")
    assert "at most 255" in refusals[2]
    stored = {job_id for (job_id,) in proc_db.query("SELECT job_id FROM inbox_job")}
    assert stored == {first["job_id"], last["job_id"]}


def test_enqueue_line_with_a_key_twice_is_refused_naming_it_and_the_rest_stored(proc_db):
    first, last = save_doc(), save_doc()
    twice = json.dumps(save_doc())[:-1] + ', "vault_path": "notes/other.md"}'
    lines = [json.dumps(first), twice, json.dumps(last)]
    proc = proc_db.manage("enqueue", "-", check=False, input="\n".join(lines) + "\n")
    assert proc.returncode == 1
    assert proc.stdout.strip() == "created 2, replayed 0, refused 1"
    assert proc.stderr.strip() == (
        "line 2: refused: not valid JSON: the key 'vault_path' appears twice in one object"
    )
    stored = {job_id for (job_id,) in proc_db.query("SELECT job_id FROM inbox_job")}
    assert stored == {first["job_id"], last["job_id"]}
