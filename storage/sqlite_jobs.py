"""What a :class:`~storage.sqlite.SQLiteStore` runs on its database thread: transactions, a batch
of calls committed together (each rerun alone if one fails), a script driven to its end; and
the same work run on the caller's thread, which never waits for another connection's lock
(:func:`without_waiting`)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from .sql import SQLITE, Procedure, Script, Statement
from .sqlite_thread import Db

T = TypeVar("T")
#: A procedure and its parameters, or one write statement's work (a function of the connection).
Call = tuple[Procedure, Mapping[str, Any]] | Callable[[Db], Any]


class NeedsTheThread(Exception):
    """The job cannot be done on the caller's thread without waiting, and did nothing there (another
    connection holds a lock it needs, or a call of its batch failed and was rolled back): queue it
    to the database thread, which waits and reruns."""


def without_waiting(db: Db, work: Callable[[Db], T]) -> T:
    """``work(db)`` with SQLite's busy timeout off (the database thread turns it on again before its
    next job): a lock another process holds raises :class:`NeedsTheThread` at once instead of
    blocking the caller's event loop for up to the timeout."""
    db.waits_for_locks(False)
    try:
        return work(db)
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise NeedsTheThread from exc
        raise


def rollback(db: Db) -> None:
    # Also after a failed COMMIT: a transaction left open would break every later BEGIN.
    with contextlib.suppress(sqlite3.Error):
        db.execute("ROLLBACK")


def immediate(db: Db, work: Callable[[Db], T]) -> T:
    """``work`` in a ``BEGIN IMMEDIATE`` transaction, committed if it returns, else rolled back."""
    db.execute("BEGIN IMMEDIATE")
    try:
        result = work(db)
        db.execute("COMMIT")
    except BaseException:
        rollback(db)
        raise
    return result


def _fetch(db: Db, statement: Statement, params: Mapping[str, Any]) -> list[sqlite3.Row]:
    return db.execute(SQLITE.sql(statement), params).fetchall()


def procedure(db: Db, call: Call) -> Any:
    """One call inside the caller's transaction: a procedure's writes, then its result row; or a
    write statement's work."""
    if callable(call):
        return call(db)
    procedure, params = call
    *writes, read = procedure.steps
    for statement in writes:
        db.execute(SQLITE.sql(statement), params)
    row: sqlite3.Row | None = db.execute(SQLITE.sql(read), params).fetchone()
    assert row is not None, procedure.name  # a procedure's result query yields one row
    return row


def run_batch(db: Db, calls: Sequence[Call], *, here: bool = False) -> list[Any]:
    """Each call's result row or error. All calls go in one transaction, in order, so a later one
    sees an earlier one's writes (two deliveries of one message: one claimed, one duplicate). If a
    call or the commit fails, the batch is rolled back and every call rerun in a transaction of its
    own, so a bad call fails alone. A BEGIN that fails (busy past the timeout) fails them all:
    rerunning would only wait out the timeout once per call. ``here`` (on the caller's thread,
    :func:`without_waiting`): a BEGIN or a call that fails raises :class:`NeedsTheThread`, nothing
    committed, and the database thread does the rest."""
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        if here:
            raise NeedsTheThread from exc
        return [exc] * len(calls)
    try:
        results: list[Any] = [procedure(db, call) for call in calls]
        db.execute("COMMIT")
        return results
    except sqlite3.Error as exc:
        rollback(db)
        if here:
            raise NeedsTheThread from exc
        if len(calls) == 1:
            return [exc]
    except BaseException:
        rollback(db)
        raise
    results = []
    for call in calls:
        try:
            results.append(immediate(db, partial(procedure, call=call)))
        except sqlite3.Error as exc:
            results.append(exc)
    return results


def drive(db: Db, script: Script) -> Any:
    """Run ``script`` (``sql.Script``) to its end on this connection."""
    try:
        statement, params = next(script)
        while True:
            statement, params = script.send(_fetch(db, statement, params))
    except StopIteration as done:
        return done.value
