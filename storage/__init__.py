"""Durable state of threadbound behind one :class:`Store` interface.

Usage::

    store = open_store(settings.database_url)  # no I/O yet
    await store.migrate()                      # connects, creates/upgrades the schema
    ...
    await store.close()                        # ends the SQLite thread / the Postgres pool

``open_store`` only parses the URL and builds the backend; the connection (or
pool) is opened on first use, normally ``migrate()`` at start-up. Connection
failures surface as :class:`StoreError` from that first call.

Where things are
----------------
- ``base.py``: the vocabulary, :class:`Store` (and ``SessionStore``, the part a session uses) and
  the records every caller relies on.
- ``schema.py``: the tables, as numbered migrations per dialect, and the one migration runner.
- ``statements.py``: every statement and procedure the store runs, written once for both dialects.
- ``sql.py``: how one statement becomes each dialect's SQL (placeholders, the few spellings that
  differ) and how a procedure becomes a Postgres function.
- ``sqlstore.py``: the store, every Store method once with its contract in its docstring, handing
  each call to one of its statement groups (``sqlstore_*.py``: tasks, leases, sessions, people,
  follow-ups, asks), which run their statements on the store's database.
- ``sqlcore.py``: :class:`~storage.sqlcore.Database`, what a backend supplies: a few ways to run
  statements (one, a procedure in one trip, a migration script) and the instances' liveness locks.
- ``sqlite.py`` / ``postgres.py``: the backends, connection plumbing only (``SQLiteDatabase``: a
  database thread with group commit; ``PostgresDatabase``: an asyncpg pool), and ``SQLiteStore`` /
  ``PostgresStore``, the store over each.
- ``_rows.py``: result rows to records (``from_row``: columns named like the record's fields).

Adding a table and its statements
---------------------------------
1. ``schema.py``: append a migration (next version) with the ``CREATE TABLE`` for each dialect
   (types differ: ``REAL``/``DOUBLE PRECISION``, ``BLOB``/``BYTEA``, JSON text/arrays). Never
   edit an applied migration.
2. ``statements.py``: write each statement once with ``:named`` parameters. A write that needs
   several statements in one transaction is a ``Procedure`` (writes first, then one query for the
   result row); add it to ``PROCEDURES`` so ``migrate()`` creates its Postgres function.
3. a statement group (``sqlstore_*.py``): write the method once over its database, with
   ``self._db.one`` / ``.fetch`` / ``.execute`` / ``.call``; a record it returns is read with
   ``_rows.from_row`` (its columns named like its fields). ``sqlstore.py``: the Store method of
   that name, its contract in its docstring, hands the call to the group.
4. ``tests/test_store_contract.py``: test it there; it runs on both backends.
Neither backend module changes unless the database needs something new from its driver.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from .base import *  # noqa: F403 (the Store and every record)
from .base import Store

_SQLITE_PREFIX = "sqlite:///"


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///`` URL: ``sqlite:///data/x.db`` is relative to the working
    directory, ``sqlite:////srv/x.db`` is absolute (the SQLAlchemy convention)."""
    if not url.lower().startswith(_SQLITE_PREFIX):
        raise ValueError(
            "a SQLite DATABASE_URL looks like sqlite:///relative/path.db or sqlite:////abs/path.db"
        )
    path = unquote(urlsplit(url).path[1:])
    if not path:
        raise ValueError("a SQLite DATABASE_URL needs a file path: sqlite:///data/threadbound.db")
    return Path(path)


def open_store(database_url: str, *, pool_size: int | None = None) -> Store:
    """The store a ``DATABASE_URL`` names, not yet connected; ``pool_size``: the most connections
    a Postgres store's pool opens (None: its own default).

    - ``sqlite:///path/to.db`` → :class:`~storage.sqlite.SQLiteStore` (parent directory created on connect)
    - ``postgresql://…`` or ``postgres://…`` → :class:`~storage.postgres.PostgresStore`
      (an optional ``?schema=NAME`` puts the tables in that schema)

    Raises ValueError for any other URL; the message never repeats the URL, which may hold a password.
    """
    scheme = database_url.split("://", 1)[0].lower() if "://" in database_url else ""
    # Backends are imported on demand: a SQLite deployment never loads asyncpg, and vice versa.
    if scheme == "sqlite":
        from .sqlite import SQLiteStore

        return SQLiteStore(sqlite_path(database_url))
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresStore

        if pool_size is None:
            return PostgresStore(database_url)
        return PostgresStore(database_url, max_size=pool_size)
    raise ValueError(
        f"unsupported DATABASE_URL scheme {scheme!r}: "
        "use sqlite:///path/to/threadbound.db or postgresql://user:password@host:5432/dbname"
    )
