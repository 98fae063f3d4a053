"""Rows → records, shared by both backends.

A row is whatever the driver returns (``sqlite3.Row``, ``asyncpg.Record``): both are read by
column name. :func:`from_row` fills a record's fields from the columns of the same names (the
``*_COLUMNS`` lists of the statements), each read by its field's type: SQLite's 0/1 as a bool, a
list of strings from JSON text (SQLite, and the ``asks.options`` column) or an array (Postgres),
``None`` kept where the field allows it. A field with a default may be missing from the row (a
sum of usage has no task or model).
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from .records import StoreStats
from .sql import Row

R = TypeVar("R")
_Read = Callable[[Any], Any]


def from_row(record: type[R], row: Row) -> R:
    """``record`` built from the row's columns of the same names as its fields (module doc)."""
    columns = set(row.keys())
    values = {
        name: read(row[name]) for name, read, required in _readers(record) if required or name in columns
    }
    return record(**values)


def stats_from_row(row: Row) -> StoreStats:
    values = {key: int(row[key]) for key in row.keys()}
    return StoreStats(tasks=values.pop("tasks"), pending_inbox=values.pop("pending_inbox"), extra=values)


#: Each record's fields with their readers and whether the row must hold them, built once.
_READERS: dict[type[Any], tuple[tuple[str, _Read, bool], ...]] = {}


def _readers(record: type[Any]) -> tuple[tuple[str, _Read, bool], ...]:
    readers = _READERS.get(record)
    if readers is None:
        # Resolving the hints compiles each string annotation: once per record type, not per row.
        hints = get_type_hints(record)
        readers = _READERS[record] = tuple(
            (f.name, _reader(hints[f.name]), f.default is MISSING and f.default_factory is MISSING)
            for f in fields(record)
        )
    return readers


def _reader(hint: Any) -> _Read:
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType) and type(None) in args:
        [inner] = [arg for arg in args if arg is not type(None)]
        read = _reader(inner)
        return lambda value: None if value is None else read(value)
    if isinstance(hint, TypeVar):  # a generic record's field (a card's decision): its bound
        return _reader(hint.__bound__)
    if origin is Literal:
        return str
    if origin is tuple:
        return _texts
    return {str: str, int: int, float: float, bool: bool, bytes: bytes}[hint]


def _texts(value: Any) -> tuple[str, ...]:
    """A list of strings: JSON text (``""`` or NULL: none) or a Postgres array."""
    items = json.loads(value or "[]") if isinstance(value, str | None) else value
    return tuple(str(item) for item in items)
