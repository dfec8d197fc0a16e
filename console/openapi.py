"""The producer API's OpenAPI document: what django-ninja writes from the views, completed with
what the server enforces and ninja cannot see.

- The request body of ``POST /api/v1/jobs``: one job document or a list of 1 to
  ``API_MAX_JOBS_PER_REQUEST``, each document one of the job types (``oneOf`` with a
  ``job_type`` discriminator), every field with the validator's own limits and patterns, no
  unknown field (``inbox.docschema``, built from the same rules).
- Path ids follow the id rule (``inbox.ids.ID_PATTERN``).
- Every error status each route can answer, as ``application/problem+json``
  (``console.problems``); a 201's ``Location`` and the link from it to the job it created.

Called by ``console.api.ProducerApi`` each time the document is asked for.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from django.conf import settings

from console.problems import PROBLEM_TYPE
from inbox.docschema import document_schemas, json_value_schema
from inbox.ids import ID_PATTERN

JOBS_PATH = "/api/v1/jobs"
JOB_PATH = "/api/v1/jobs/{job_id}"
SCHEMAS = "#/components/schemas/"
JSON_VALUE = "JsonValue"
DOCUMENT = "JobDocument"

# Every status each operation can answer beyond what its view declares, and why.
ERRORS = {
    400: "A NUL byte in the address, query or a cookie.",
    401: "No valid bearer token (or console session).",
    403: "A console session without the permission to create jobs, or without CSRF token.",
    404: "No such job for this producer.",
    409: "An idempotency conflict: the same job_id or idempotency_key, other content.",
    411: "A chunked body on a server that cannot read one: send a Content-Length.",
    413: "Over the body limit or the limit of documents in one list.",
    415: "The body is not application/json (a charset may say utf-8).",
    422: "Not valid JSON (a key twice in one object included), or refused documents.",
    503: "The database stayed busy; nothing was stored. Retry after Retry-After seconds.",
}
STATUSES = {
    (JOBS_PATH, "post"): (400, 401, 403, 409, 411, 413, 415, 422, 503),
    (JOB_PATH, "get"): (400, 401, 404, 503),
}
# A job document any producer could send first (the docs page shows it).
EXAMPLE = {
    "job_id": "inv-42",
    "job_version": 1,
    "mission_id": "m-42",
    "job_type": "NOOP",
    "object_id": "inv-42",
    "vault_path": "noop/inv-42",
    "idempotency_key": "noop:inv-42",
}


def _component_name(job_type: str) -> str:
    return "Document_" + re.sub(r"[^A-Za-z0-9._-]", "_", job_type)


def _documents(components: dict[str, Any]) -> None:
    """Each job type's document schema, the union of them and the JSON value tasks carry."""
    refs = {}
    for job_type, schema in document_schemas(json_ref=SCHEMAS + JSON_VALUE).items():
        name = _component_name(job_type)
        components[name] = schema
        refs[job_type] = SCHEMAS + name
    components[JSON_VALUE] = json_value_schema(SCHEMAS + JSON_VALUE)
    components[DOCUMENT] = {
        "description": "A job document: the fields a producer sends for one job, per job type. "
        "Unknown fields are refused.",
        "oneOf": [{"$ref": ref} for ref in refs.values()],
        "discriminator": {"propertyName": "job_type", "mapping": refs},
    }


def _request_body() -> dict[str, Any]:
    document = {"$ref": SCHEMAS + DOCUMENT}
    limit = settings.API_MAX_JOBS_PER_REQUEST
    many = {"type": "array", "items": document, "minItems": 1, "maxItems": limit}
    return {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"oneOf": [document, many]},
                "examples": {"one": {"summary": "One NOOP job", "value": EXAMPLE}},
            }
        },
    }


def _problems(operation: dict[str, Any], statuses: tuple[int, ...]) -> None:
    # ninja keys responses by number; the document's keys are text.
    responses = {str(k): v for k, v in operation.get("responses", {}).items()}
    operation["responses"] = responses
    problem = {PROBLEM_TYPE: {"schema": {"$ref": SCHEMAS + "Problem"}}}
    for status in statuses:
        responses.setdefault(str(status), {"description": ERRORS[status]})
    for status, response in responses.items():
        if int(status) >= 400:
            response["content"] = copy.deepcopy(problem)
            response["description"] = ERRORS.get(int(status), response.get("description", ""))


def _created(operation: dict[str, Any], get_job_id: str) -> None:
    """A 201 for one document has a Location; its first job can be read back."""
    created = operation["responses"]["201"]
    created["headers"] = {
        "Location": {
            "description": "The created job (one document sent).",
            "required": False,
            "schema": {"type": "string"},
        }
    }
    created["links"] = {
        "GetJob": {
            "operationId": get_job_id,
            "parameters": {"job_id": "$response.body#/jobs/0/job_id"},
        }
    }


def describe(schema: Any) -> Any:
    """``schema`` (ninja's, as a dict) completed; see the module docstring."""
    paths = schema["paths"]
    _documents(schema.setdefault("components", {}).setdefault("schemas", {}))
    post, get = paths[JOBS_PATH]["post"], paths[JOB_PATH]["get"]
    post["requestBody"] = _request_body()
    for (path, method), statuses in STATUSES.items():
        _problems(paths[path][method], statuses)
    _created(post, get["operationId"])
    for parameter in get.get("parameters", []):
        if parameter["name"] == "job_id":
            parameter["schema"] = {"type": "string", "pattern": ID_PATTERN}
    return schema
