"""SQL written once, rendered per dialect.

A :class:`Statement` is SQL with named parameters (``:task_id``). SQLite binds them by name as they
are; Postgres gets ``$1…$n`` in order of first appearance. The few spellings that differ between
the two are template fields a :class:`Dialect` fills in:

- ``{skip_locked}``: `` FOR UPDATE SKIP LOCKED`` on Postgres (concurrent deleters split the rows),
  nothing on SQLite (one writer at a time anyway);
- ``{for_share}``: `` FOR SHARE`` on Postgres (a fenced write locks the lease row it checks until it
  commits, so the lease cannot move in between), nothing on SQLite (its writes are serial);
- ``{each:NAME}``: the elements of the id-list parameter ``:NAME`` as a subquery, for
  ``item_id IN {each:consumed}``.

(Templates go through ``str.format``: a literal brace is written twice, ``'{{}}'``.)

List parameters travel as JSON text to SQLite and as arrays to Postgres (:meth:`Dialect.texts`,
:meth:`Dialect.ids`); the column types differ the same way (``schema.py``).

A :class:`Procedure` is a few statements that make one transaction: every statement but the last
writes, the last one reads the result row. SQLite runs them one after the other in a ``BEGIN
IMMEDIATE`` transaction on its database thread; Postgres runs them as the body of a PL/pgSQL
function generated from the same statements (one round trip, one implicit transaction). The
function's name carries a digest of its body, so every instance calls exactly the statements it
was built with, also during a rolling deploy; ``migrate()`` creates it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cache, cached_property
from typing import Any, Final, Literal, Protocol

DialectName = Literal["sqlite", "postgres"]

_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


class Row(Protocol):
    """A result row as both drivers return it (``sqlite3.Row``, ``asyncpg.Record``)."""

    def __getitem__(self, key: str, /) -> Any: ...

    def keys(self) -> Any: ...


class SqlType(Enum):
    """Parameter and result column types of procedures, by their Postgres name."""

    TEXT = "text"
    REAL = "double precision"
    BOOL = "boolean"
    BYTES = "bytea"
    BIGINT = "bigint"
    TEXTS = "text[]"
    IDS = "bigint[]"


def typed(names: str) -> tuple[tuple[str, SqlType], ...]:
    """Procedure parameters or result columns, in order, from ``"task_id now:real created:bool"``:
    each name is ``TEXT`` unless ``:kind`` names another :class:`SqlType` (``real``, ``bool``…)."""
    pairs = (name.partition(":") for name in names.split())
    return tuple((name, SqlType[kind.upper()] if kind else SqlType.TEXT) for name, _, kind in pairs)


@dataclass(frozen=True, slots=True)
class Statement:
    """One SQL statement with ``:name`` parameters and optional dialect fields (module doc)."""

    template: str
    #: Run as written, without parameters or fields (DDL of migrations, generated functions).
    verbatim: bool = False
    #: False: a write that must survive the process dying but needs no disk sync of its own (a
    #: lease, a handle, a usage row): SQLite commits it without syncing its WAL, and the next synced
    #: commit (any claim, checkpoint, journal entry or save) syncs it too, since a WAL only grows.
    #: After a power loss the database is as of some commit; at worst such a write since the last
    #: synced one is missing. Postgres syncs every commit.
    synced: bool = True

    def params(self, dialect: Dialect) -> tuple[str, ...]:
        """Parameter names in order of first appearance, after the dialect's fields are filled in."""
        return tuple(dict.fromkeys(_PARAM.findall(dialect.fill(self))))


class _Each:
    def __init__(self, spelling: str) -> None:
        self._spelling = spelling

    def __format__(self, param: str) -> str:
        return self._spelling.format(param=param)


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one database spells what differs. ``SQLITE`` and ``POSTGRES`` are the two there are."""

    name: DialectName
    skip_locked: str
    for_share: str
    #: ``{each:NAME}``: a subquery over the elements of list parameter ``:NAME``.
    each: str
    #: Whether list parameters are bound as JSON text (SQLite) rather than arrays (Postgres).
    json_lists: bool
    _fields: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = {"skip_locked": self.skip_locked, "for_share": self.for_share, "each": _Each(self.each)}
        object.__setattr__(self, "_fields", fields)

    def fill(self, statement: Statement) -> str:
        if statement.verbatim:
            return statement.template
        return statement.template.format_map(self._fields)

    def sql(self, statement: Statement, order: Sequence[str] | None = None) -> str:
        """The statement's text for this dialect; on Postgres ``:name`` becomes ``$k``, ``k`` the
        name's position in ``order`` (default: the statement's own order of first appearance)."""
        return _compile(self, statement, None if order is None else tuple(order))[0]

    def args(self, statement: Statement, params: Mapping[str, Any]) -> Any:
        """What the driver binds: the mapping itself on SQLite, values in ``$k`` order on Postgres."""
        if self.name == "sqlite":
            return params
        return tuple(params[name] for name in _compile(self, statement, None)[1])

    def texts(self, values: Sequence[str] | None) -> Any:
        """A list of strings (``tasks.enabled_tools``) as this dialect stores it."""
        if values is None:
            return None
        return json.dumps(list(values)) if self.json_lists else list(values)

    def ids(self, values: Sequence[int]) -> Any:
        """A list of ids for ``{each:NAME}``."""
        return json.dumps(list(values)) if self.json_lists else list(values)


@cache
def _compile(
    dialect: Dialect, statement: Statement, order: tuple[str, ...] | None
) -> tuple[str, tuple[str, ...]]:
    text = dialect.fill(statement)
    names = statement.params(dialect)
    if dialect.name == "sqlite" or statement.verbatim:
        return text, names
    index = {name: i for i, name in enumerate(order or names, start=1)}
    return _PARAM.sub(lambda m: f"${index[m.group(1)]}", text), names


SQLITE: Final = Dialect(
    "sqlite", skip_locked="", for_share="", each="(SELECT value FROM json_each(:{param}))", json_lists=True
)
POSTGRES: Final = Dialect(
    "postgres",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    for_share=" FOR SHARE",
    each="(SELECT unnest(:{param}::bigint[]))",
    json_lists=False,
)


@dataclass(frozen=True)
class Procedure:
    """Statements run as one transaction; the last one's single row is the result (module doc)."""

    name: str
    #: Parameters in call order, with their types (Postgres needs them for the function signature).
    params: tuple[tuple[str, SqlType], ...]
    #: Columns of the result row, with their types.
    returns: tuple[tuple[str, SqlType], ...]
    #: Writes first, then the one read of the result.
    steps: tuple[Statement, ...]

    @cached_property
    def function(self) -> tuple[str, str]:
        """Postgres: ``(name, CREATE FUNCTION statement)``. The body is these statements in order,
        each with a fresh snapshot (a VOLATILE function's statements see what concurrent
        transactions committed while an earlier statement waited on them, as separate statements
        of a READ COMMITTED transaction would); column names win over the OUT parameters."""
        order = [name for name, _ in self.params]
        *writes, read = (POSTGRES.sql(step, order) for step in self.steps)
        lines = ["#variable_conflict use_column", "BEGIN", *(f"{w};" for w in writes)]
        body = "\n".join([*lines, f"RETURN QUERY {read};", "END"])
        digest = hashlib.sha256(body.encode()).hexdigest()[:12]
        name = f"tb_{self.name}_{digest}"
        signature = ", ".join(kind.value for _, kind in self.params)
        columns = ", ".join(f"{column} {kind.value}" for column, kind in self.returns)
        create = (
            f"CREATE OR REPLACE FUNCTION {name}({signature}) RETURNS TABLE ({columns})"
            f" LANGUAGE plpgsql VOLATILE AS $tb$\n{body}\n$tb$"
        )
        return name, create

    @cached_property
    def call(self) -> Statement:
        """Postgres: the statement that calls :meth:`function` with this procedure's parameters."""
        name, _ = self.function
        columns = ", ".join(column for column, _ in self.returns)
        args = ", ".join(f":{param}" for param, _ in self.params)
        return Statement(f"SELECT {columns} FROM {name}({args})")


#: A script is a plain generator: it yields ``(statement, params)`` and is sent the rows each one
#: returned; what it returns is the script's result. Both backends drive it in one transaction
#: (SQLite on its thread, Postgres one round trip per statement); only ``migrate()`` needs one.
Script = Generator[tuple[Statement, Mapping[str, Any]], Sequence[Row], Any]
