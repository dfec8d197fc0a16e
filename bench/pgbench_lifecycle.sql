-- The pure-SQL lifecycle ceiling (bench/throughput.py): one pgbench "transaction" is one job's
-- life on our own tables (inbox_job, audit_auditevent with its append-only triggers):
--   1. claim: lock the next READY id with SKIP LOCKED, guarded UPDATE ... RETURNING, audit row;
--   2. complete: guarded UPDATE on the claim, audit row.
-- Run with -M prepared and exactly as many transactions as READY jobs were loaded.
BEGIN;
WITH picked AS (
    SELECT job_id FROM inbox_job
    WHERE state = 'READY' AND scope = 'noop'
    ORDER BY (created_at AT TIME ZONE 'UTC'), job_id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE inbox_job AS j
SET state = 'CLAIMED', worker_id = 'pgbench', claim_id = replace(gen_random_uuid()::text, '-', ''),
    claimed_at = statement_timestamp(), lease_until = statement_timestamp() + interval '60 seconds',
    attempt_count = j.attempt_count + 1, updated_at = statement_timestamp()
FROM picked
WHERE j.job_id = picked.job_id AND j.state = 'READY'
RETURNING j.job_id AS job_id, j.claim_id AS claim_id
\gset
INSERT INTO audit_auditevent (job_id, run_id, event_type, actor, result_code, detail, created_at)
VALUES (:job_id, NULL, 'CLAIMED', 'pgbench', '',
        jsonb_build_object('from', 'READY', 'to', 'CLAIMED', 'claim_id', CAST(:claim_id AS text)),
        statement_timestamp());
COMMIT;
BEGIN;
UPDATE inbox_job
SET state = 'SUCCEEDED', result_code = 'OK', lease_until = NULL, updated_at = statement_timestamp()
WHERE job_id = :job_id AND state = 'CLAIMED' AND claim_id = :claim_id;
INSERT INTO audit_auditevent (job_id, run_id, event_type, actor, result_code, detail, created_at)
VALUES (:job_id, NULL, 'SUCCEEDED', 'pgbench', 'OK',
        jsonb_build_object('from', 'CLAIMED', 'to', 'SUCCEEDED'), statement_timestamp());
COMMIT;
