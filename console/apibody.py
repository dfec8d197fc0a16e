"""Reading a producer's JSON body: its type, its size and its keys, before any document is seen.

- Only ``application/json`` is read (a ``charset`` parameter may say ``utf-8``, nothing else):
  415 otherwise, a missing type included, so a form post or a text body is never guessed at.
- A chunked body (``Transfer-Encoding: chunked``, no ``Content-Length``) is read from the
  server's de-chunked stream where the WSGI server provides one (gunicorn, werkzeug:
  ``wsgi.input_terminated``) and under ASGI; a server that hands over the raw socket gets 411.
  Either way no more than the limit and one byte is ever read: over it is a 413.
- A key twice in one object is refused (422, naming the key): which of the two a parser keeps
  differs between parsers, so the document would mean different things to different readers.

``read_json`` is the one way in; ``console.api`` turns its ``BodyRefused`` into a problem.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from django.http import HttpRequest

from core import jsondoc

JSON_TYPE = "application/json"
_CHUNK = 64 * 1024


class BodyRefused(Exception):
    """The body cannot be read as a JSON document: ``status`` and a ``detail`` to answer."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def check_content_type(request: HttpRequest) -> None:
    """415 unless the request says ``application/json`` (optionally ``; charset=utf-8``)."""
    media_type = (request.content_type or "").strip().lower()
    if media_type != JSON_TYPE:
        sent = f"{request.content_type!r}" if request.content_type else "no Content-Type"
        raise BodyRefused(415, f"the body must be {JSON_TYPE}, got {sent}")
    params = {k.lower(): v for k, v in (request.content_params or {}).items()}
    charset = params.pop("charset", "utf-8").strip().lower()
    if charset not in ("utf-8", "utf8") or params:
        raise BodyRefused(415, f"the body must be {JSON_TYPE} in UTF-8, without other parameters")


def _stream(request: HttpRequest) -> _Readable:
    """Where the body can be read from without trusting a length that is not there."""
    meta = request.META
    chunked = "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower()
    if not chunked or meta.get("CONTENT_LENGTH") or "wsgi.input" not in meta:
        # Django bounds the stream by Content-Length; under ASGI it holds the whole body.
        return request
    if meta.get("wsgi.input_terminated"):
        # The server de-chunked it and ends the stream at the body's end.
        return meta["wsgi.input"]
    raise BodyRefused(411, "this server cannot read a chunked body: send a Content-Length")


def read_body(request: HttpRequest, limit: int) -> bytes:
    """The body's bytes, at most ``limit`` of them (413 beyond, read no further)."""
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise BodyRefused(413, f"the body is over {limit:,} bytes")
    stream = _stream(request)
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        part = stream.read(min(_CHUNK, limit + 1 - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    if size > limit:
        raise BodyRefused(413, f"the body is over {limit:,} bytes")
    return b"".join(parts)


def parse_json(body: bytes) -> Any:
    """The JSON document in ``body``; 422 when it is not JSON or repeats a key in an object."""
    try:
        return jsondoc.loads(body)
    except jsondoc.DuplicateKey as exc:
        raise BodyRefused(422, f"the body is not valid JSON: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise BodyRefused(422, f"the body is not valid JSON: {reason}") from None


def read_json(request: HttpRequest, *, limit: int) -> Any:
    """The request's JSON document: its type, then its size, then its syntax and keys."""
    check_content_type(request)
    return parse_json(read_body(request, limit))
