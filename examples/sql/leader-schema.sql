-- Once: the fence of the leader lock, and the log of what each term did.
CREATE TABLE leader_fence (
  lock text PRIMARY KEY,
  term numeric(20,0) NOT NULL DEFAULT 0
       CHECK (term BETWEEN 0 AND 18446744073709551615)
);
CREATE TABLE leader_log (
  seq  bigserial PRIMARY KEY,
  lock text NOT NULL,
  term numeric(20,0) NOT NULL,
  node text NOT NULL,
  at   timestamptz NOT NULL DEFAULT now()
);
