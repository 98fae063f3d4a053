"""Durable state of threadbound behind one :class:`Store` interface.

Usage::

    store = open_store(settings.database_url)  # no I/O yet
    await store.migrate()                      # connects, creates/upgrades the schema
    ...
    await store.close()                        # always: an open SQLite connection blocks process exit

``open_store`` only parses the URL and builds the backend; the connection (or
pool) is opened on first use, normally ``migrate()`` at start-up. Connection
failures surface as :class:`StoreError` from that first call.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from .base import (
    ClaimOutcome,
    ClaimStatus,
    EffectRecord,
    EffectState,
    HandleKind,
    HandleRecord,
    InboxItem,
    LeaseRecord,
    Store,
    StoreError,
    StoreStats,
    TaskRecord,
)

__all__ = [
    "ClaimOutcome",
    "ClaimStatus",
    "EffectRecord",
    "EffectState",
    "HandleKind",
    "HandleRecord",
    "InboxItem",
    "LeaseRecord",
    "Store",
    "StoreError",
    "StoreStats",
    "TaskRecord",
    "open_store",
    "sqlite_path",
]

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


def open_store(database_url: str) -> Store:
    """The store a ``DATABASE_URL`` names, not yet connected.

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

        return PostgresStore(database_url)
    raise ValueError(
        f"unsupported DATABASE_URL scheme {scheme!r}: "
        "use sqlite:///path/to/threadbound.db or postgresql://user:password@host:5432/dbname"
    )
