-- Once, before the first run: one row per guarded job. The token column
-- holds every u64 (a bigint stops at 2^63 - 1).
CREATE TABLE job_state (
  job      text PRIMARY KEY,
  token    numeric(20,0) NOT NULL DEFAULT 0
           CHECK (token BETWEEN 0 AND 18446744073709551615),
  last_run timestamptz,
  result   text
);
INSERT INTO job_state (job) VALUES ('nightly-import');
