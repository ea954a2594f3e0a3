-- $1 job, $2 token in decimal text (PostgreSQL has no u64 type), $3 result.
-- 0 rows: a newer holder of the lock has written; this one must stop.
UPDATE job_state
   SET token = $2::text::numeric, last_run = now(), result = $3
 WHERE job = $1 AND token <= $2::text::numeric
