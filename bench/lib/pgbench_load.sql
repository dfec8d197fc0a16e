-- N READY NOOP jobs for one pgbench round (setup, not measured). Parameters: mission, N.
-- The payload is the document our own load stores (bench/lib/ourside.py noop_document).
INSERT INTO inbox_job (
    job_id, job_version, mission_id, job_type, scope, object_id, vault_path, payload, state,
    idempotency_key, requested_by, worker_id, claim_id, attempt_count, max_attempts,
    result_code, last_error, note, fingerprint, created_at, updated_at
)
SELECT
    %(mission)s || '-' || lpad(i::text, 7, '0'), 1, %(mission)s, 'NOOP', 'noop', 'obj-' || i,
    'noop/' || %(mission)s || '/' || i,
    jsonb_build_object('job_id', %(mission)s || '-' || lpad(i::text, 7, '0'), 'job_version', 1,
        'mission_id', %(mission)s, 'job_type', 'NOOP', 'object_id', 'obj-' || i,
        'vault_path', 'noop/' || %(mission)s || '/' || i,
        'idempotency_key', 'noop:' || %(mission)s || ':' || i),
    'READY', 'noop:' || %(mission)s || ':' || i, 'bench', '', '', 0, 5, '', '', '',
    repeat('0', 64), statement_timestamp(), statement_timestamp()
FROM generate_series(0, %(n)s - 1) AS i;
