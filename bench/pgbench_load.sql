-- N READY NOOP jobs for one pgbench round (setup, not measured). Parameters: mission, N.
INSERT INTO inbox_job (
    job_id, job_version, mission_id, job_type, scope, object_id, vault_path, payload, state,
    idempotency_key, requested_by, worker_id, claim_id, attempt_count, max_attempts,
    result_code, last_error, note, fingerprint, created_at, updated_at
)
SELECT
    %(mission)s || '-' || lpad(i::text, 7, '0'), 1, %(mission)s, 'NOOP', 'noop', 'obj-' || i,
    'noop/' || %(mission)s || '/' || i,
    jsonb_build_object('job_id', %(mission)s || '-' || lpad(i::text, 7, '0'), 'job_type', 'NOOP'),
    'READY', 'noop:' || %(mission)s || ':' || i, 'bench', '', '', 0, 5, '', '', '',
    repeat('0', 64), statement_timestamp(), statement_timestamp()
FROM generate_series(0, %(n)s - 1) AS i;
