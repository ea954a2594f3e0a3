#!/usr/bin/env python3
"""A job that takes a lock and writes its result to PostgreSQL, fenced by
the lock's token: a holder that was paused past its lease and resumed after
a newer holder wrote finds its write refused (0 rows) and stops.

    pip install ./clients/python 'psycopg[binary]'
    DATABASE_URL=postgres://app@db.internal/app python3 examples/fenced_postgres.py --job nightly-import

Exit codes are those of `monolock exec`: 0 written, 64 usage, 69 lock
server or database unreachable, 75 busy with --no-wait, 79 the lock was
lost or the write was fenced off, 1 another database error.
"""

import argparse
import os
import re
import signal
import sys
from pathlib import Path
from typing import NoReturn, Optional

import monolock
import psycopg
from psycopg import conninfo

PROGRAM = "fenced_postgres.py"

USAGE, UNAVAILABLE, NOT_ACQUIRED, LOST, FAILURE = 64, 69, 75, 79, 1

# The statement of the Rust form, from the same file: $1 job, $2 token as
# decimal text, $3 result (a RawCursor sends $n placeholders as they are).
FENCED_WRITE = (Path(__file__).resolve().parent / "sql" / "fenced-write.sql").read_text()

CONNECT_TIMEOUT_S = 5


class Failure(Exception):
    """Why the job stops: one line for stderr and the exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def connect(url: str) -> psycopg.Connection:
    """Connects to the database; the messages never repeat the URL, which
    may hold a password."""
    try:
        conninfo.conninfo_to_dict(url)
    except psycopg.Error as err:
        raise Failure(USAGE, f"invalid DATABASE_URL: {one_line(err).replace(url, '...')}") from None
    try:
        return psycopg.connect(
            url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True, cursor_factory=psycopg.RawCursor
        )
    except psycopg.Error as err:
        raise Failure(UNAVAILABLE, f"cannot connect to the database: {one_line(err)}") from None


def write(db: psycopg.Connection, job: str, token: int, result: str) -> bool:
    """Writes `result` for `job` under `token`. False: the row holds a newer
    token, the write was refused and this holder must stop.

    The token travels as decimal text into a numeric(20,0) column:
    PostgreSQL has no unsigned 64-bit type, and a bigint stops at 2^63 - 1.
    """
    with db.cursor() as cur:
        cur.execute(FENCED_WRITE, (job, str(token), result))
        return cur.rowcount == 1


def run(args: argparse.Namespace) -> None:
    # The database first: a job that cannot write should not take the lock.
    if not args.database_url:
        raise Failure(USAGE, "no database to write to: set DATABASE_URL or pass --database-url")
    db = connect(args.database_url)
    lock = acquire(args)
    token = lock.token
    say(f"holding {args.job} under token {token}")

    result = args.result or work()
    # Check right before the write, and fence the write anyway: a pause can
    # strike between the check and the write.
    if lock.loss is not None:
        raise Failure(LOST, f"lost the lock before writing: {lock.loss}")
    if os.environ.get("PAUSE_BEFORE_WRITE", "").lower() not in ("", "0", "false", "no", "off"):
        pause()
    try:
        written = write(db, args.job, token, result)
    except psycopg.Error as err:
        raise Failure(FAILURE, f"writing {args.job}: {one_line(err)}") from None
    if not written:
        raise Failure(LOST, f"fenced off: a newer holder of {args.job} has written; token {token} refused")
    say(f"wrote {args.job} under token {token}")
    try:
        lock.release()
    except monolock.LockLost as lost:
        raise Failure(LOST, f"the lock was lost before the end (the write itself was fenced): {lost}") from None


def acquire(args: argparse.Namespace) -> monolock.Lock:
    """Queues for the lock (or only tries, with --no-wait)."""
    client = monolock.Client(args.server)
    try:
        lock = client.try_lock(args.job, args.lease) if args.no_wait else client.lock(args.job, args.lease)
    except monolock.Error as err:
        code = UNAVAILABLE if err.is_temporary() else USAGE
        raise Failure(code, f"cannot acquire lock {args.job!r}: {err}") from None
    if lock is None:
        raise Failure(NOT_ACQUIRED, f"lock {args.job!r} is busy")
    return lock


def work() -> str:
    """The job's real work; here, a result to write."""
    return f"imported by pid {os.getpid()}"


def pause() -> None:
    """Stops this process as a GC pause or a suspended VM would; returns
    once it is continued (kill -CONT)."""
    print(f"{PROGRAM}: pausing before the write (kill -CONT {os.getpid()})", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


def say(line: str) -> None:
    print(line, flush=True)


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def lease(text: str) -> float:
    """A duration as `monolock exec --lease` takes it: 500ms, 2s, 1m, 1h."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (e.g. 500ms, 2s, 1m)")
    unit = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2)]
    return float(match.group(1)) * unit


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: {message}\n")


def parse(argv: Optional[list] = None) -> argparse.Namespace:
    parser = Parser(prog=PROGRAM, description="Take a lock, then write to PostgreSQL fenced by its token")
    parser.add_argument("--job", default="nightly-import", help="the lock's name and the key of its row in job_state")
    parser.add_argument(
        "--database-url", default=os.environ.get("DATABASE_URL"), help="the database [env: DATABASE_URL]"
    )
    parser.add_argument(
        "--server",
        default=os.environ.get(monolock.ADDRESS_ENV) or monolock.DEFAULT_ADDRESS,
        help=f"the monolock server [env: {monolock.ADDRESS_ENV}]",
    )
    parser.add_argument("--lease", type=lease, default=lease("2s"), help="the lease (default 2s)")
    parser.add_argument("--no-wait", action="store_true", help="give up at once (exit 75) if the lock is held")
    parser.add_argument("--result", help="what to write as the job's result")
    return parser.parse_args(argv)


def main() -> int:
    args = parse()
    try:
        run(args)
    except Failure as failure:
        print(f"{PROGRAM}: {failure}", file=sys.stderr)
        return failure.code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
