-- The batched ceiling (bench/lib/drains.py drain_pgbench): our executor's shape in pure SQL on our
-- own tables (inbox_job, audit_auditevent with its append-only triggers, inbox_finishedcount).
-- One pgbench "transaction" is a batch of 10 jobs, written as our executor writes them:
--   1. claim: pick 10 READY ids of a scope that is not paused with SKIP LOCKED, one guarded
--      UPDATE ... RETURNING that claims and begins them (READY -> EXECUTING) and sends their whole
--      rows to the client (the executor runs the jobs from them), their CLAIMED, STARTED and
--      AUTHORIZED audit rows in one INSERT, one transaction;
--   2. complete: one guarded UPDATE of the 10 on their claims (EXECUTING -> SUCCEEDED) that sends
--      back the sealed columns (the executor re-checks each seal), their EXECUTED and SUCCEEDED
--      audit rows, and the client's per-minute count of finished jobs (one row per client and
--      minute), a second transaction.
-- The same rows, columns and event details as ours: only Python is missing. The claim orders by
-- the same expression as ours, so it takes the same index.
-- Run with -M prepared and N / 10 transactions in all (N READY jobs loaded).
BEGIN;
WITH picked AS MATERIALIZED (
    SELECT job_id FROM inbox_job
    WHERE state = 'READY' AND scope = 'noop'
      AND (run_after IS NULL OR run_after <= statement_timestamp())
      AND NOT EXISTS (SELECT 1 FROM inbox_scopepause WHERE scope = 'noop' AND paused)
    ORDER BY (created_at AT TIME ZONE 'UTC'), job_id
    LIMIT 10
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE inbox_job AS j
    SET state = 'EXECUTING', worker_id = 'pgbench',
        claim_id = replace(gen_random_uuid()::text, '-', ''),
        claimed_at = statement_timestamp(),
        lease_until = statement_timestamp() + interval '60 seconds',
        attempt_count = j.attempt_count + 1, updated_at = statement_timestamp()
    FROM picked
    WHERE j.job_id = picked.job_id AND j.state = 'READY'
    RETURNING j.*
), audited AS (
    INSERT INTO audit_auditevent (job_id, run_id, event_type, actor, result_code, detail, created_at)
    SELECT c.job_id, NULL, e.event_type, 'pgbench', '',
           CASE e.k
               WHEN 1 THEN jsonb_build_object('from', 'READY', 'to', 'CLAIMED',
                   'claim_id', c.claim_id, 'attempt', c.attempt_count,
                   'lease_until', to_jsonb(c.lease_until))
               WHEN 2 THEN jsonb_build_object('from', 'CLAIMED', 'to', 'EXECUTING')
               ELSE jsonb_build_object('from', 'CLAIMED', 'to', 'EXECUTING',
                   'schema', 'ok', 'fingerprint', c.fingerprint)
           END,
           c.updated_at
    FROM claimed AS c
    CROSS JOIN (VALUES (1, 'CLAIMED'), (2, 'STARTED'), (3, 'AUTHORIZED')) AS e(k, event_type)
    ORDER BY c.job_id, e.k
)
SELECT coalesce(string_agg(job_id || ' ' || claim_id, ','), '') AS batch,
       coalesce(json_agg(claimed)::text, '') AS claimed_rows
FROM claimed
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
    WHERE j.job_id = held.job_id AND j.claim_id = held.claim_id AND j.state = 'EXECUTING'
    RETURNING j.job_id, j.mission_id, j.job_type, j.scope, j.object_id, j.vault_path,
              j.approval_id, j.payload, j.state, j.result_code, j.fingerprint, j.updated_at
), audited AS (
    INSERT INTO audit_auditevent (job_id, run_id, event_type, actor, result_code, detail, created_at)
    SELECT d.job_id, NULL, e.event_type, 'pgbench', 'OK',
           CASE e.k
               WHEN 1 THEN jsonb_build_object('from', 'EXECUTING', 'to', 'SUCCEEDED',
                   'handler', 'inbox.handlers.noop', 'duration_ms', 0.0)
               ELSE jsonb_build_object('from', 'EXECUTING', 'to', 'SUCCEEDED')
           END,
           d.updated_at
    FROM done AS d
    CROSS JOIN (VALUES (1, 'EXECUTED'), (2, 'SUCCEEDED')) AS e(k, event_type)
    ORDER BY d.job_id, e.k
), counted AS (
    INSERT INTO inbox_finishedcount (minute, scope, state, shard, finished)
    SELECT date_trunc('minute', updated_at, 'UTC'), scope, state, :client_id, count(*)
    FROM done
    GROUP BY 1, 2, 3
    ON CONFLICT (minute, scope, state, shard)
    DO UPDATE SET finished = inbox_finishedcount.finished + EXCLUDED.finished
)
SELECT * FROM done;
COMMIT;
