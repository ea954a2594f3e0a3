#!/bin/sh
# A job that writes to PostgreSQL only while no newer holder of its lock has:
#   monolock exec nightly-import -- examples/fenced-postgres.sh
# It needs DATABASE_URL, and the MONOLOCK_TOKEN that `monolock exec` sets.
set -eu
: "${DATABASE_URL:?set DATABASE_URL, e.g. postgres://app@db.internal/app}"
: "${MONOLOCK_TOKEN:?run this under monolock exec, which sets MONOLOCK_TOKEN}"
job=${MONOLOCK_LOCK:-nightly-import}
result="imported on $(uname -n) by pid $$"
echo "holding $job under token $MONOLOCK_TOKEN"

# ... the real work goes here ...

# Only for the fault demonstration: stop here, as a GC pause or a suspended
# VM would, until `kill -CONT`.
if [ -n "${PAUSE_BEFORE_WRITE:-}" ]; then
  echo "fenced-postgres.sh: pausing before the write (kill -CONT $$)" >&2
  kill -STOP $$
fi

rows=$(psql "$DATABASE_URL" -X -qtA -v ON_ERROR_STOP=1 \
  -v job="$job" -v token="$MONOLOCK_TOKEN" -v result="$result" <<'SQL'
WITH fenced AS (
  UPDATE job_state
     SET token = :'token', last_run = now(), result = :'result'
   WHERE job = :'job' AND token <= :'token'
  RETURNING 1
)
SELECT count(*) FROM fenced;
SQL
)
if [ "$rows" != 1 ]; then
  echo "fenced off: a newer holder of $job has written; token $MONOLOCK_TOKEN refused" >&2
  exit 1
fi
echo "wrote $job under token $MONOLOCK_TOKEN"
