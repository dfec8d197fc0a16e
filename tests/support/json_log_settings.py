"""Settings for the JSON-log tests: a job type whose handler raises (scope ``boom``), so the
executor logs an error while a job and its claim are in hand."""

from config.settings import *  # noqa: F403

INBOX_JOB_TYPES = {
    "BOOM_NOOP": {
        "scope": "boom",
        "idempotent": True,
        "handler": "tests.executors.slow.boom_handler",
    },
}
