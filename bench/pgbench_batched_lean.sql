-- A lighter batched ceiling (bench/throughput.py), kept beside pgbench_batched.sql for comparison:
-- the shape issue 15 first sketched, with one audit row per step where our executor writes three
-- at the claim and two at the completion. One pgbench "transaction" is a batch of 10 jobs:
--   1. claim: pick 10 READY ids with SKIP LOCKED, one guarded UPDATE ... RETURNING, and their
--      CLAIMED audit rows in one INSERT, one transaction;
--   2. complete: one guarded UPDATE of the 10 on their claims, their SUCCEEDED audit rows in one
--      INSERT, a second transaction.
-- Run with -M prepared and N / 10 transactions in all (N READY jobs loaded).
BEGIN;
WITH picked AS (
    SELECT job_id FROM inbox_job
    WHERE state = 'READY' AND scope = 'noop'
    ORDER BY (created_at AT TIME ZONE 'UTC'), job_id
    LIMIT 10
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE inbox_job AS j
    SET state = 'CLAIMED', worker_id = 'pgbench',
        claim_id = replace(gen_random_uuid()::text, '-', ''),
        claimed_at = statement_timestamp(),
        lease_until = statement_timestamp() + interval '60 seconds',
        attempt_count = j.attempt_count + 1, updated_at = statement_timestamp()
    FROM picked
    WHERE j.job_id = picked.job_id AND j.state = 'READY'
    RETURNING j.job_id, j.claim_id
), audited AS (
    INSERT INTO audit_auditevent (job_id, run_id, event_type, actor, result_code, detail, created_at)
    SELECT job_id, NULL, 'CLAIMED', 'pgbench', '',
           jsonb_build_object('from', 'READY', 'to', 'CLAIMED', 'claim_id', claim_id),
           statement_timestamp()
    FROM claimed
)
SELECT coalesce(string_agg(job_id || ' ' || claim_id, ','), '') AS batch FROM claimed
\gset
COMMIT;
BEGIN;
WITH held AS (
    SELECT split_part(x, ' ', 1) AS job_id, split_part(x, ' ', 2) AS claim_id
    FROM unnest(string_to_array(:batch, ',')) AS x
), done AS (
    UPDATE inbox_job AS j
    SET state = 'SUCCEEDED', result_code = 'OK', lease_until = NULL,
        updated_at = statement_timestamp()
    FROM held
    WHERE j.job_id = held.job_id AND j.claim_id = held.claim_id AND j.state = 'CLAIMED'
    RETURNING j.job_id
)
INSERT INTO audit_auditevent (job_id, run_id, event_type, actor, result_code, detail, created_at)
SELECT job_id, NULL, 'SUCCEEDED', 'pgbench', 'OK',
       jsonb_build_object('from', 'CLAIMED', 'to', 'SUCCEEDED'), statement_timestamp()
FROM done;
COMMIT;
