-- One act of a leader, fenced by its term (the lock's token): $1 lock,
-- $2 term in decimal text, $3 node. 0 rows: a newer term has acted.
WITH fence AS (
  INSERT INTO leader_fence AS f (lock, term) VALUES ($1, $2::text::numeric)
  ON CONFLICT (lock) DO UPDATE SET term = EXCLUDED.term
   WHERE f.term <= EXCLUDED.term
  RETURNING term
)
INSERT INTO leader_log (lock, term, node) SELECT $1, term, $3 FROM fence
