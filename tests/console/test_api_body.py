"""How the producer API reads a body: only ``application/json`` (415 otherwise), chunked
bodies from a server that de-chunks them (gunicorn; 411 where the server cannot), never more
than the body limit and one byte, and no key twice in one object."""

from __future__ import annotations

import http.client
import io
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from inbox.models import Job
from inbox.tokens import create_token
from tests.console.apikit import JOBS, post
from tests.factories import noop_doc
from tests.support.webserver import gunicorn

pytestmark = pytest.mark.django_db


@pytest.fixture
def token() -> str:
    return create_token(producer="acme", actor="test").token


def _raw_post(client: Client, token: str, body: bytes, content_type: str | None, **environ: Any):
    """POST ``body`` with exactly this Content-Type (None: none at all)."""
    environ.setdefault("HTTP_AUTHORIZATION", f"Bearer {token}")
    # Set here too: the test client leaves the type out of a request without data.
    environ["CONTENT_TYPE"] = content_type or ""
    return client.generic("POST", JOBS, body, content_type=content_type or "", **environ)


# --- the content type ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json-patch+json",
        "application/json; charset=latin-1",
        "application/json; profile=job",
    ],
)
def test_post_with_another_content_type_is_415_and_stores_nothing(
    client: Client, token: str, content_type: str | None
) -> None:
    response = _raw_post(client, token, json.dumps(noop_doc()).encode(), content_type)
    assert response.status_code == 415
    assert response["Content-Type"] == "application/problem+json"
    assert "application/json" in response.json()["detail"]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON; Charset=UTF-8"],
)
def test_post_with_json_content_type_is_read(client: Client, token: str, content_type: str) -> None:
    response = _raw_post(client, token, json.dumps(noop_doc()).encode(), content_type)
    assert response.status_code == 201


# --- chunked bodies -----------------------------------------------------------------------------


def _chunked(body: bytes | io.RawIOBase, *, terminated: bool = True) -> dict[str, Any]:
    """The environ a WSGI server gives a chunked request: no Content-Length, the de-chunked
    body as ``wsgi.input`` and, when it de-chunked it, ``wsgi.input_terminated``."""
    environ: dict[str, Any] = {
        "CONTENT_LENGTH": "",
        "HTTP_TRANSFER_ENCODING": "chunked",
        "wsgi.input": io.BytesIO(body) if isinstance(body, bytes) else body,
    }
    if terminated:
        environ["wsgi.input_terminated"] = True
    return environ


def test_chunked_body_from_a_dechunking_server_is_read(client: Client, token: str) -> None:
    doc = noop_doc()
    body = json.dumps(doc).encode()
    response = _raw_post(client, token, b"", "application/json", **_chunked(body))
    assert response.status_code == 201, response.content
    assert Job.objects.filter(job_id=doc["job_id"]).exists()


def test_chunked_body_from_a_server_that_cannot_dechunk_is_411(client: Client, token: str) -> None:
    body = json.dumps(noop_doc()).encode()
    response = _raw_post(client, token, b"", "application/json", **_chunked(body, terminated=False))
    assert response.status_code == 411
    assert "Content-Length" in response.json()["detail"]
    assert not Job.objects.exists()


class Endless(io.RawIOBase):
    """A body that never ends; counts what was read from it."""

    def __init__(self) -> None:
        self.taken = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = 1 << 20 if size is None or size < 0 else size
        self.taken += size
        return b" " * size


def test_chunked_body_over_the_limit_is_413_read_no_further(
    client: Client, token: str, settings
) -> None:
    settings.API_MAX_BODY_BYTES = 10_000
    stream = Endless()
    response = _raw_post(client, token, b"", "application/json", **_chunked(stream))
    assert response.status_code == 413
    assert stream.taken <= 10_001


# --- duplicate keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"job_id": "a", "job_id": "b"}', "job_id"),
        ('[{"mission_id": "m"}, {"x": {"deep": 1, "deep": 2}}]', "deep"),
    ],
)
def test_a_key_twice_in_one_object_is_422_naming_it(
    client: Client, token: str, text: str, key: str
) -> None:
    response = post(client, text, token)
    assert response.status_code == 422
    assert response["Content-Type"] == "application/problem+json"
    assert repr(key) in response.json()["detail"]
    assert not Job.objects.exists()


def test_a_document_whose_duplicate_key_would_pass_is_still_refused(
    client: Client, token: str
) -> None:
    doc = noop_doc()
    # The last "job_version" wins in json.loads: the document would be valid if read that way.
    text = json.dumps(doc)[:-1] + ', "job_version": 1}'
    text = text.replace('"job_version": 1,', '"job_version": 2,', 1)
    response = post(client, text, token)
    assert response.status_code == 422
    assert "'job_version'" in response.json()["detail"]
    assert not Job.objects.exists()


# --- a real server ------------------------------------------------------------------------------


def _send_chunked(url: str, token: str, chunks: list[bytes]) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(urlsplit(url).netloc, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        conn.request("POST", JOBS, body=iter(chunks), headers=headers, encode_chunked=True)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.slow
def test_gunicorn_reads_a_chunked_body_within_the_limit(proc_db) -> None:
    token = proc_db.manage("create_token", "--producer", "acme").stdout.strip().splitlines()[-1]
    with gunicorn(proc_db, API_MAX_BODY_BYTES="5000") as url:
        text = json.dumps(noop_doc(job_id="chunked-1")).encode()
        status, body = _send_chunked(url, token, [text[:10], text[10:50], text[50:]])
        assert (status, body["jobs"][0]["job_id"]) == (201, "chunked-1")
        status, body = _send_chunked(url, token, [b"[" + b" " * 4000, b" " * 4000 + b"]"])
        assert (status, body["status"]) == (413, 413)
        status, body = _send_chunked(url, token, [b'{"a": 1,', b' "a": 2}'])
        assert status == 422 and "'a'" in body["detail"]
    assert proc_db.query("SELECT job_id FROM inbox_job") == [("chunked-1",)]
