"""What the producer API tests share: the jobs route and a POST as a producer would send it."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

JOBS = "/api/v1/jobs"


def post(client: Client, body: Any, token: str | None = None, **headers: str):
    """POST ``body`` (JSON-encoded unless already text or bytes) to the jobs route."""
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return client.post(JOBS, data=data, content_type="application/json", headers=headers)
