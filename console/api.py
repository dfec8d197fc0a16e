"""The producer API under ``/api/v1/``, built with django-ninja.

- ``POST /api/v1/jobs`` takes one job document or a list of up to
  ``API_MAX_JOBS_PER_REQUEST`` (1,000), stored in one transaction through
  ``inbox.transitions.create_jobs(all_or_nothing=True)``: 201 when something was created, 200
  when everything was a safe replay, 422 listing every problem of every refused document, 409
  for an idempotency conflict (in both cases nothing is stored), 413 over the body or list
  limit, 415 for a body that is not JSON (``console.apibody``), 401 without a valid token.
- ``GET /api/v1/jobs/<job_id>``: state, result code, lease and trail. A producer sees only the
  jobs it requested (another producer's job is a 404, as if it did not exist).
- ``/api/v1/openapi.json`` and ``/api/v1/docs`` (Swagger UI served from our own static files)
  describe it (``console.openapi`` completes ninja's document with what the server enforces);
  they hold no data and need no login.
- Every error is a JSON problem (``console.problems``).

Who calls: ``Authorization: Bearer <token>`` from ``manage.py create_token`` (the producer's
name becomes ``requested_by``; no CSRF: a bearer token is not sent by a browser on its own), or
a logged-in console session, which must send the CSRF token on a POST and needs the
``inbox.add_job`` permission to create. The views parse and answer; the inbox's services
decide. Routes: ``console.urls`` (declared ``api`` in ``console.policy``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import URLPattern, URLResolver, reverse
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError
from ninja.openapi.docs import Swagger
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

import console.converters  # noqa: F401  (the ``anyid`` route converter)
from console.apibody import BodyRefused, read_json
from console.openapi import describe
from console.policy import api_route, public
from console.problems import problem
from core.clock import db_now
from inbox.errors import IdempotencyConflict, JobValidationError
from inbox.models import Job
from inbox.selectors import job_trail
from inbox.tokens import producer_for
from inbox.transitions import Created, create_jobs

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
CREATE_PERMISSION = "inbox.add_job"


@dataclass(frozen=True)
class Caller:
    """Who is calling: a producer (token) or a console user (session)."""

    name: str
    via: str  # "token" | "session"
    user: Any = None


class ProducerToken(HttpBearer):
    """``Authorization: Bearer <token>``; a wrong or revoked token is a 401, even when the
    request also carries a session (a broken producer must not pass as a person)."""

    def authenticate(self, request: HttpRequest, token: str) -> Caller | None:
        producer = producer_for(token.strip())
        if producer is None:
            raise AuthenticationError(message="The bearer token is unknown or revoked.")
        return Caller(producer, "token")


class ConsoleSession(APIKeyCookie):
    """A logged-in console user; a POST must carry the CSRF token (``X-CSRFToken``)."""

    param_name = settings.SESSION_COOKIE_NAME

    def __init__(self) -> None:
        # csrf=True tells the Swagger page to send the token; the check itself is below, once
        # the request is known to come from a session (an anonymous POST is a 401, not a 403).
        super().__init__(csrf=True)

    def _get_key(self, request: HttpRequest) -> str | None:
        return request.COOKIES.get(self.param_name)

    def authenticate(self, request: HttpRequest, key: str | None) -> Caller | None:
        user = getattr(request, "user", None)
        if not key or user is None or not user.is_authenticated:
            return None
        if request.method not in SAFE_METHODS and check_csrf(request) is not None:
            raise HttpError(
                403,
                "CSRF check failed: a session must send the CSRF token (X-CSRFToken); "
                "producers use a bearer token instead.",
            )
        return Caller(user.get_username(), "session", user)


class LocalSwagger(Swagger):
    """The Swagger UI page from the project's own static files, rendered by Django's template
    engine. django-ninja does that only when it is an installed app, and links a CDN
    otherwise; it is not one here, so that a worker, a management command or a test process
    does not import it (and pydantic) at app population: that was a fifth of an executor's
    start-up. Its template and static folders are in ``TEMPLATES`` and ``STATICFILES_DIRS``
    instead (``config.settings``)."""

    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        self.settings["url"] = self.get_openapi_url(api, kwargs)
        context = {
            "swagger_settings": json.dumps(self.settings, indent=1),
            "api": api,
            # The page sends the CSRF token when an authentication asks for it (a console
            # session's POST: ``ConsoleSession``).
            "add_csrf": any(getattr(auth, "csrf", False) for auth in api.auth or ()),
        }
        return render(request, self.template, context)


class ProducerApi(NinjaAPI):
    """The API whose OpenAPI document carries the job-document schemas and the problems
    (``console.openapi``), built when asked for, so it follows the settings of the moment."""

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        return describe(super().get_openapi_schema(**kwargs))


api = ProducerApi(
    title="Job & Run Console — producer API",
    version="1",
    description=(
        "Put jobs into the inbox and follow them. Authenticate with `Authorization: Bearer "
        "<token>` (`manage.py create_token --producer NAME`)."
    ),
    urls_namespace="console:api",
    auth=[ProducerToken(), ConsoleSession()],
    docs=LocalSwagger(settings={"persistAuthorization": False}),
    docs_url="/docs",
    openapi_url="/openapi.json",
)


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    message = exc.message if exc.message != "Unauthorized" else "A valid bearer token is needed."
    response = problem(401, message)
    response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return problem(exc.status_code, str(exc))


# --- schemas (for the OpenAPI document) ------------------------------------------------------


class JobRef(Schema):
    index: int
    job_id: str
    state: str
    outcome: str  # "created" | "replayed"


class Stored(Schema):
    created: int
    replayed: int
    jobs: list[JobRef]


class DocumentProblems(Schema):
    index: int
    job_id: str | None = None
    problems: list[str]


class Problem(Schema):
    """A JSON problem (application/problem+json): what went wrong, per document if any."""

    title: str
    status: int
    detail: str
    errors: list[DocumentProblems] = []


class Lease(Schema):
    worker_id: str
    claimed_at: str | None
    lease_until: str | None
    seconds_left: float


class TrailEvent(Schema):
    event_id: int
    event_type: str
    actor: str
    result_code: str
    created_at: str
    detail: dict[str, Any]


class JobOut(Schema):
    job_id: str
    job_type: str
    state: str
    result_code: str
    last_error: str
    attempt_count: int
    requested_by: str
    mission_id: str
    object_id: str
    created_at: str
    updated_at: str
    lease: Lease | None
    trail: list[TrailEvent]


# --- the endpoints -----------------------------------------------------------------------------


def _job_url(job_id: str) -> str:
    return reverse("console:api:get_job", kwargs={"job_id": job_id})


@api.post(
    "/jobs",
    response={
        200: Stored,
        201: Stored,
        401: Problem,
        403: Problem,
        409: Problem,
        413: Problem,
        422: Problem,
    },
    summary="Put one job or a list of jobs into the inbox",
    tags=["jobs"],
    description=(
        "One document, or a list of up to 1,000 stored in one transaction. Any refused "
        "document stores nothing: 422 lists every problem by position, 409 names an "
        "idempotency conflict. 201 when at least one job was created, 200 when every document "
        "was a safe replay of a stored job."
    ),
)
def post_jobs(request: HttpRequest) -> HttpResponse:
    caller: Caller = request.auth  # type: ignore[attr-defined]
    if caller.via == "session" and not caller.user.has_perm(CREATE_PERMISSION):
        return problem(403, f"creating jobs needs the {CREATE_PERMISSION} permission")
    try:
        data = read_json(request, limit=settings.API_MAX_BODY_BYTES)
    except BodyRefused as refused:
        return problem(refused.status, refused.detail)
    single = not isinstance(data, list)
    documents = [data] if single else data
    limit = settings.API_MAX_JOBS_PER_REQUEST
    if len(documents) > limit:
        return problem(413, f"{len(documents):,} documents is over the limit of {limit:,}")
    if not documents:
        return problem(422, "the list is empty: send one document or a list of 1 to 1,000")
    # The whole answer, Location included, is built inside the transaction: if building it
    # failed, nothing would be stored, so no request can fail after its jobs were committed.
    with transaction.atomic():
        result = create_jobs(documents, requested_by=caller.name, all_or_nothing=True)
        foreign = _foreign(documents, result, caller.name)
        if foreign:
            # Another producer's job is not replayed for this one: nothing is kept.
            transaction.set_rollback(True)
        if result.refused or foreign:
            return _refusal(documents, result.refused, foreign)
        return _stored(result, single=single)


def _foreign(documents: list[Any], result: Created, producer: str) -> dict[int, str]:
    """Documents whose job_id or idempotency_key is already another producer's job, by position,
    each with a problem that names only what the document itself sent. Ids and keys are one
    namespace for every producer, so such a document cannot be stored; it is answered as a
    conflict without a word about the job that holds the id (its id, state or owner)."""
    taken: dict[int, str] = {
        i: job.job_id for i, job in result.replayed.items() if job.requested_by != producer
    }
    conflicts = {
        i: exc for i, exc in result.refused.items() if isinstance(exc, IdempotencyConflict)
    }
    owners = dict(
        Job.objects.filter(job_id__in=[e.existing_job_id for e in conflicts.values()]).values_list(
            "job_id", "requested_by"
        )
    )
    for i, exc in conflicts.items():
        if owners.get(exc.existing_job_id, producer) != producer:
            taken[i] = exc.existing_job_id
    out = {}
    for i, holder_id in taken.items():
        doc = documents[i]
        name = "job_id" if holder_id == doc["job_id"] else "idempotency_key"
        out[i] = f"{name}: {doc[name]!r} is already in use; choose another"
    return out


def _stored(result: Created, *, single: bool) -> JsonResponse:
    """201 (something created) or 200 (all replays), with a Location for one document."""
    jobs = [
        {"index": i, "job_id": job.job_id, "state": job.state, "outcome": outcome}
        for outcome, stored in (("created", result.created), ("replayed", result.replayed))
        for i, job in stored.items()
    ]
    jobs.sort(key=lambda j: j["index"])
    response = JsonResponse(
        {"created": len(result.created), "replayed": len(result.replayed), "jobs": jobs},
        status=201 if result.created else 200,
    )
    if single:
        response["Location"] = _job_url(jobs[0]["job_id"])
    return response


def _refusal(
    documents: list[Any], refused: dict[int, Exception], foreign: dict[int, str]
) -> JsonResponse:
    """422 when any document is invalid (every problem listed), else 409 (conflicts)."""
    invalid = any(isinstance(exc, JobValidationError) for exc in refused.values())
    errors = []
    for index in sorted(refused.keys() | foreign.keys()):
        exc = refused.get(index)
        doc = documents[index]
        job_id = doc.get("job_id") if isinstance(doc, dict) else None
        if index in foreign:
            problems = [foreign[index]]
        elif isinstance(exc, JobValidationError):
            problems = exc.problems
        else:
            problems = [str(exc)]
        errors.append(
            {
                "index": index,
                "job_id": job_id if isinstance(job_id, str) else None,
                "problems": problems,
            }
        )
    if invalid:
        return problem(422, f"{len(errors)} document(s) refused; nothing was stored", errors=errors)
    return problem(
        409,
        f"{len(errors)} idempotency conflict(s): the same job_id or idempotency_key is "
        "already in use; nothing was stored",
        errors=errors,
    )


@api.get(
    "/jobs/{anyid:job_id}",
    response={200: JobOut, 401: Problem, 404: Problem},
    url_name="get_job",
    summary="A job's state, result, lease and trail",
    tags=["jobs"],
)
def get_job(request: HttpRequest, job_id: str) -> HttpResponse:
    caller: Caller = request.auth  # type: ignore[attr-defined]
    jobs = Job.objects.filter(job_id=job_id)
    if caller.via == "token":
        # A producer sees its own jobs only; another producer's job does not exist for it.
        jobs = jobs.filter(requested_by=caller.name)
    job = jobs.annotate(now=Now()).first()
    if job is None:
        return problem(404, f"no job {job_id!r}")
    return JsonResponse(job_document(job))


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def job_document(job: Job) -> dict[str, Any]:
    """The GET representation: snapshot, lease (while held) and trail, oldest event first."""
    now = getattr(job, "now", None) or db_now()
    lease = None
    if job.lease_until is not None and job.state in ("CLAIMED", "EXECUTING"):
        lease = {
            "worker_id": job.worker_id,
            "claimed_at": _iso(job.claimed_at),
            "lease_until": _iso(job.lease_until),
            "seconds_left": max(round((job.lease_until - now).total_seconds(), 1), 0.0),
        }
    return {
        "job_id": job.job_id,
        "job_type": job.job_type,
        "state": job.state,
        "result_code": job.result_code,
        "last_error": job.last_error,
        "attempt_count": job.attempt_count,
        "requested_by": job.requested_by,
        "mission_id": job.mission_id,
        "object_id": job.object_id,
        "created_at": _iso(job.created_at),
        "updated_at": _iso(job.updated_at),
        "lease": lease,
        "trail": [
            {
                "event_id": e.event_id,
                "event_type": e.event_type,
                "actor": e.actor,
                "result_code": e.result_code,
                "created_at": _iso(e.created_at),
                "detail": e.detail,
            }
            for e in job_trail(job.job_id)
        ],
    }


# --- URLs ---------------------------------------------------------------------------------------

# The routes that describe the API rather than serve it: public, they hold no data.
_DESCRIPTIVE = {"openapi-json", "openapi-view", "api-root"}


def urls() -> tuple[list[URLPattern | URLResolver], str, str]:
    """``api.urls`` with every route declared in ``console.policy`` (the route matrix)."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if pattern.name in _DESCRIPTIVE:
            public(pattern.callback)
        else:
            api_route(pattern.callback, name=pattern.name or "")
    return patterns, app_name, namespace
