"""The producer API against its own OpenAPI document, by schemathesis with every check and
every phase (examples, coverage, fuzzing, stateful), over HTTP to the console served by
gunicorn, as a producer with a token.

``CONSOLE_SCHEMATHESIS_EXAMPLES`` sizes it (examples per operation and phase; default 50). It
must find nothing, and every operation must have answered at least one generated request with a
2xx: a schema that only ever produced refusals would test nothing.

Two rules the schema states in words and JSON Schema cannot check are kept by the generated
client, as any producer keeps them (a ``before_call`` hook): ``provenance_hash`` is the sha256 of
``content``, a task's ``object_id`` is its ``task_path`` (and a retry's ``cap`` is at least its
``backoff``). Only documents that already carry valid values are completed, so a case meant to
be refused still is.
"""

from __future__ import annotations

import collections
import os
import random
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from schemathesis.engine import events

from inbox.jobtypes import SHA256_RE, sha256_hex
from inbox.retries import DEFAULTS
from tests.support.webserver import gunicorn

EXAMPLES = int(os.environ.get("CONSOLE_SCHEMATHESIS_EXAMPLES", "50"))
# A failure names its seed; CONSOLE_SCHEMATHESIS_SEED=<seed> replays it.
SEED = int(os.environ.get("CONSOLE_SCHEMATHESIS_SEED") or random.randrange(2**32))


def keep_unstated_rules(doc: Any) -> None:
    """Complete ``doc`` as a producer that follows the schema's words would send it."""
    if not isinstance(doc, dict):
        return
    content, declared = doc.get("content"), doc.get("provenance_hash")
    if isinstance(content, str) and isinstance(declared, str) and SHA256_RE.fullmatch(declared):
        doc["provenance_hash"] = sha256_hex(content)
    path = doc.get("task_path")
    if isinstance(path, str) and isinstance(doc.get("object_id"), str):
        doc["object_id"] = path
    retry = doc.get("retry")
    if isinstance(retry, dict):
        backoff, cap = (retry.get(k, DEFAULTS[k]) for k in ("backoff", "cap"))
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in (backoff, cap)):
            if cap < backoff:
                retry["backoff"], retry["cap"] = cap, backoff


# A refusal is a refusal: schemathesis's list of them, with "too large" (a list over the limit).
REFUSALS = ["400", "401", "403", "404", "405", "406", "409", "411", "413", "415", "422", "428"]


def _config(token: str) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "headers": {"Authorization": f"Bearer {token}"},
            "generation": {"max-examples": EXAMPLES},
            "checks": {
                "enabled": True,
                "negative_data_rejection": {"expected-statuses": REFUSALS},
            },
            "phases": {"enabled": True},
            "workers": 1,
            "seed": SEED,
        }
    )


@pytest.fixture
def console_url(proc_db) -> Iterator[str]:
    """The console under gunicorn on a database of its own. Smaller limits, which the schema
    follows: schemathesis sends a value at every bound and one past it, and drawing a 1 MiB
    text or a list of 1,000 documents field by field takes minutes (test_api.py tests the
    default limits)."""
    with gunicorn(proc_db, INBOX_MAX_CONTENT_BYTES="2048", API_MAX_JOBS_PER_REQUEST="4") as url:
        yield url


@pytest.fixture
def producer_token(proc_db) -> str:
    out = proc_db.manage("create_token", "--producer", "schemathesis").stdout
    return out.strip().splitlines()[-1]


@pytest.fixture
def producer_keeps_unstated_rules() -> Iterator[None]:
    """Complete every generated body before it is sent, in every phase (``before_call`` is the
    one hook all of them run; schemathesis then re-checks whether the case is still valid)."""

    def before_call(
        context: schemathesis.HookContext, case: schemathesis.Case, kwargs: Any
    ) -> None:
        body = case.body
        if isinstance(body, list):
            for doc in body:
                keep_unstated_rules(doc)
        else:
            keep_unstated_rules(body)

    schemathesis.hook(before_call)
    yield
    schemathesis.hooks.unregister(before_call)


def _run(schema: Any) -> tuple[list[str], dict[str, float]]:
    """Run every phase: every failed check and engine error, in words with its reproduction,
    and the seconds each phase took."""
    found = []
    started: dict[str, float] = {}
    took: dict[str, float] = {}
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.PhaseStarted):
            started[event.phase.name.value] = event.timestamp
        if isinstance(event, events.PhaseFinished):
            name = event.phase.name.value
            took[name] = round(event.timestamp - started.get(name, event.timestamp), 1)
        if isinstance(event, events.NonFatalError):
            found.append(f"{event.label}: {event.info.title}\n{event.info}\n{event.value!r}")
        if isinstance(event, events.FatalError):
            found.append(f"fatal: {event.exception!r}")
        if isinstance(event, events.ScenarioFinished):
            for nodes in event.recorder.checks.values():
                for node in nodes:
                    if node.failure_info is not None:
                        failure = node.failure_info.failure
                        found.append(
                            f"{failure.operation}: {failure.title} ({node.name})\n"
                            f"{failure.message}\n{node.failure_info.code_sample}"
                        )
    return found, took


@pytest.mark.slow
@pytest.mark.usefixtures("producer_keeps_unstated_rules")
def test_producer_api_meets_its_openapi_schema(console_url: str, producer_token: str) -> None:
    schema = schemathesis.openapi.from_url(
        f"{console_url}/api/v1/openapi.json", config=_config(producer_token)
    )
    answered: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)

    @schema.hook
    def after_call(
        context: schemathesis.HookContext, case: schemathesis.Case, response: Any
    ) -> None:
        answered[case.operation.label][response.status_code] += 1

    failures, took = _run(schema)
    report = {label: dict(sorted(counts.items())) for label, counts in answered.items()}
    calls = sum(sum(counts.values()) for counts in report.values())
    print(f"schemathesis: {calls} requests; statuses by operation: {report}; seconds: {took}")
    assert not failures, f"seed {SEED}:\n" + "\n\n".join(dict.fromkeys(failures))
    operations = {result.ok().label for result in schema.get_all_operations()}
    without_2xx = {
        label for label in operations if not any(200 <= s < 300 for s in answered[label])
    }
    assert len(operations) == 2 and not without_2xx, (SEED, report)
