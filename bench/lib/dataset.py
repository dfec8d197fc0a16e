"""A large, valid table of jobs and audit events, generated server-side on PostgreSQL.

``load(db, jobs, events)`` creates and migrates the database, then fills it with INSERT …
SELECT over generate_series, the secondary indexes dropped first and rebuilt after, then
VACUUM ANALYZE: jobs over every state and type (created two seconds apart, the newest now),
whole audit events per job, and the executors' per-minute finished counts. Every sealed job's
fingerprint is the sha256 the product computes, so the product's own checks pass on them. The
console, sweeps and prune benchmarks start from it (setup, not measured).
"""

from __future__ import annotations

import json
import time
from typing import Any

from lib import base as bl

STATE_SQL = """CASE
    WHEN b < 800 THEN 'SUCCEEDED' WHEN b < 840 THEN 'READY' WHEN b < 850 THEN 'CLAIMED'
    WHEN b < 860 THEN 'EXECUTING' WHEN b < 900 THEN 'FAILED' WHEN b < 910 THEN 'OUTCOME_UNKNOWN'
    WHEN b < 950 THEN 'REJECTED' WHEN b < 960 THEN 'RECONCILED' ELSE 'CREATED' END"""


def _q(expr: str) -> str:
    """A JSON string value or null, for the canonical fingerprint text."""
    return f"COALESCE('\"' || {expr} || '\"', 'null')"


JOBS_SQL = f"""
INSERT INTO inbox_job (
    job_id, job_version, mission_id, job_type, scope, object_id, vault_path, approval_id,
    payload, state, idempotency_key, requested_by, worker_id, claim_id, claimed_at, lease_until,
    attempt_count, max_attempts, result_code, last_error, supersedes, note, fingerprint,
    created_at, updated_at
)
SELECT
    job_id, 1, mission, jt, scope, obj, path, appr,
    jsonb_strip_nulls(jsonb_build_object(
        'job_id', job_id, 'job_version', 1, 'mission_id', mission, 'job_type', jt,
        'object_id', obj, 'vault_path', path, 'idempotency_key', ikey,
        'content', content, 'provenance_hash', ph, 'source_commit', sc,
        'delete_request_id', drid, 'expected_provenance_hash', eph)),
    st, ikey, 'producer-' || mod(i, 5),
    CASE WHEN held_once THEN 'executor-' || scope || '-' || mod(i, 4) ELSE '' END,
    CASE WHEN held_once THEN md5(i::text) ELSE '' END,
    CASE WHEN held_once THEN created + interval '1 second' END,
    CASE WHEN st IN ('CLAIMED', 'EXECUTING')
         THEN statement_timestamp() + (mod(i, 90) - 15) * interval '1 second' END,
    CASE WHEN held_once THEN 1 + (mod(i, 3) = 0)::int ELSE 0 END,
    5,
    CASE st WHEN 'SUCCEEDED' THEN 'OK' WHEN 'FAILED' THEN 'HASH_MISMATCH'
            WHEN 'OUTCOME_UNKNOWN' THEN 'UNKNOWN' WHEN 'REJECTED' THEN 'APPROVAL_DENIED'
            WHEN 'RECONCILED' THEN 'CONFIRMED_DELETED' ELSE '' END,
    CASE WHEN st IN ('FAILED', 'REJECTED', 'OUTCOME_UNKNOWN') THEN 'benchmark row' ELSE '' END,
    NULL, '',
    CASE WHEN st = 'CREATED' THEN '' ELSE encode(sha256(convert_to(
        '{{"approval_id":' || {_q("appr")} || ',"delete_request_id":' || {_q("drid")}
        || ',"expected_commit":null,"expected_provenance_hash":' || {_q("eph")}
        || ',"job_type":"' || jt || '","mission_id":"' || mission || '","object_id":"' || obj
        || '","provenance_hash":' || {_q("ph")} || ',"source_commit":' || {_q("sc")}
        || ',"vault_path":"' || path || '"}}', 'UTF8')), 'hex') END,
    created,
    created + CASE WHEN st IN ('CREATED', 'READY') THEN interval '0' ELSE interval '2 s' END
FROM (
    SELECT s.*,
        st NOT IN ('CREATED', 'READY') AS held_once,
        CASE WHEN jt = 'SAVE_OBJECT' THEN '# Note ' || i END AS content,
        CASE WHEN jt = 'SAVE_OBJECT'
             THEN encode(sha256(convert_to('# Note ' || i, 'UTF8')), 'hex') END AS ph,
        CASE WHEN jt = 'SAVE_OBJECT' THEN 'c' || mod(i, 997) END AS sc,
        CASE WHEN jt = 'DELETE_OBJECT' THEN 'r' || i END AS drid,
        CASE WHEN jt = 'DELETE_OBJECT'
             THEN encode(sha256(convert_to('old ' || i, 'UTF8')), 'hex') END AS eph,
        CASE WHEN jt = 'DELETE_OBJECT' AND st <> 'CREATED' THEN 'ap-' || i END AS appr,
        lower(jt) || ':' || obj || ':' || i AS ikey
    FROM (
        SELECT i, b, {STATE_SQL} AS st,
            'job-' || lpad(i::text, 8, '0') AS job_id,
            CASE WHEN mod(i, 20) < 12 THEN 'SAVE_OBJECT' WHEN mod(i, 20) < 16 THEN 'DELETE_OBJECT'
                 ELSE 'NOOP' END AS jt,
            CASE WHEN mod(i, 20) < 12 THEN 'save' WHEN mod(i, 20) < 16 THEN 'delete'
                 ELSE 'noop' END AS scope,
            'm-' || (i / 100) AS mission,
            'obj-' || i AS obj,
            'notes/obj-' || i || '.md' AS path,
            statement_timestamp() - (%(n)s - i) * interval '2 seconds' AS created
        FROM (SELECT i, mod(i::bigint * 7919, 1000) AS b FROM generate_series(1, %(n)s) AS i) g
    ) s
) t
"""

EVENTS_SQL = """
INSERT INTO audit_auditevent (job_id, run_id, event_type, actor, result_code, detail, created_at)
SELECT j.job_id, NULL,
    CASE k WHEN 0 THEN 'REQUESTED'
           WHEN 1 THEN CASE WHEN j.state = 'CREATED' THEN 'OPERATOR_ACTION' ELSE 'READY' END
           ELSE CASE j.state WHEN 'CLAIMED' THEN 'CLAIMED' WHEN 'EXECUTING' THEN 'STARTED'
                WHEN 'READY' THEN 'LEASE_EXPIRED' WHEN 'CREATED' THEN 'OPERATOR_ACTION'
                ELSE j.state END END,
    CASE WHEN k = 0 OR j.worker_id = '' THEN j.requested_by ELSE j.worker_id END,
    CASE WHEN k >= 2 THEN j.result_code ELSE '' END,
    jsonb_build_object('from', CASE k WHEN 0 THEN NULL WHEN 1 THEN 'CREATED' ELSE 'READY' END,
                       'to', CASE k WHEN 0 THEN 'CREATED' WHEN 1 THEN 'READY' ELSE j.state END,
                       'object_id', j.object_id),
    j.created_at + k * interval '500 milliseconds'
FROM inbox_job j CROSS JOIN generate_series(0, %(per_job)s - 1) AS k
ORDER BY j.job_id, k
"""

# What the executors would have counted as the jobs finished (inbox.FinishedCount, one shard):
# every minute of the generated history, so the throughput chart reads a table of its real size.
COUNTS_SQL = """
INSERT INTO inbox_finishedcount (minute, scope, state, shard, finished)
SELECT date_trunc('minute', updated_at, 'UTC'), scope, state, 0, count(*)
FROM inbox_job WHERE state IN ('SUCCEEDED', 'FAILED', 'OUTCOME_UNKNOWN')
GROUP BY 1, 2, 3
"""

SECONDARY_INDEXES_SQL = """
SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
WHERE t.relname = ANY(%s)
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
"""


def load(db: str, jobs: int, events: int) -> dict[str, float]:
    """Create, migrate and fill the database; return the setup timings."""
    import psycopg

    timings: dict[str, float] = {}
    t = time.perf_counter()
    bl.recreate_pg_db(db)
    bl.migrate(bl.pg_url(db))
    timings["create + migrate"] = time.perf_counter() - t
    tables = ["inbox_job", "audit_auditevent"]
    with psycopg.connect(bl.pg_url(db), autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        indexes = conn.execute(SECONDARY_INDEXES_SQL, [tables]).fetchall()
        for name, _ in indexes:
            conn.execute(f"DROP INDEX {name}")
        t = time.perf_counter()
        conn.execute(JOBS_SQL, {"n": jobs})
        timings[f"insert {jobs:,} jobs"] = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute(EVENTS_SQL, {"per_job": max(1, events // jobs)})
        timings[f"insert {max(1, events // jobs) * jobs:,} events"] = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute(COUNTS_SQL)
        timings["per-minute throughput counts"] = time.perf_counter() - t
        t = time.perf_counter()
        for _, definition in indexes:
            conn.execute(definition)
        timings[f"rebuild {len(indexes)} secondary indexes"] = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) inbox_job")
        conn.execute("VACUUM (ANALYZE) audit_auditevent")
        conn.execute("VACUUM (ANALYZE) inbox_finishedcount")
        timings["VACUUM ANALYZE"] = time.perf_counter() - t
        # Kept with the data, so a --reuse run still reports what the load cost.
        record = {"at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "timings": timings}
        conn.execute(f'COMMENT ON DATABASE "{db}" IS {_literal(json.dumps(record))}')
    return timings


def _literal(text: str) -> str:
    """A SQL string literal (COMMENT takes no parameters)."""
    return "'" + text.replace("'", "''") + "'"


def recorded_load(db: str) -> dict[str, Any] | None:
    """The timings the load of this database recorded (None: loaded before they were kept)."""
    import psycopg

    with psycopg.connect(bl.pg_url(db), autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            [db],
        ).fetchone()
    try:
        return json.loads(row[0]) if row and row[0] else None
    except ValueError:
        return None


def setup_note(timings: dict[str, float], *, at: str = "") -> str:
    total = sum(timings.values())
    steps = "; ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    when = f", loaded {at}" if at else ""
    return f"- setup (not measured{when}): {total / 60:.1f} min in all: {steps}"


def loaded_counts(db: str) -> tuple[int, int] | None:
    import psycopg

    try:
        with psycopg.connect(bl.pg_url(db), autocommit=True, connect_timeout=5) as conn:
            j = conn.execute("SELECT count(*) FROM inbox_job").fetchone()[0]
            e = conn.execute("SELECT count(*) FROM audit_auditevent").fetchone()[0]
            return j, e
    except Exception:
        return None
