"""The storage layer's own machinery: SQL written once per dialect, the SQLite database thread,
and the upgrade of an existing database to the one claim definition (schema v3)."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import storage.schema
from storage import Store
from storage._rows import from_row
from storage.base import ApprovalRecord, AskRecord, CardRecord, ClaimOutcome, TaskRecord, UsageRecord
from storage.postgres import PostgresStore
from storage.sql import POSTGRES, SQLITE, SqlType, Statement, typed
from storage.sqlite import SQLiteStore
from storage.sqlite_jobs import procedure
from storage.statements import CLAIM, PROCEDURES

#: The ``store_factory`` fixture: ``await factory(migrate=True)`` opens another store on the same database.
StoreFactory = Callable[..., Awaitable[Store]]
T0 = 1_700_000_000.0


def test_statements_render_per_dialect() -> None:
    """One statement gives SQLite its named parameters and Postgres ``$n`` by first appearance,
    a repeated name reusing its number, and each dialect its own spelling of the template fields."""
    statement = Statement(
        "DELETE FROM inbox WHERE task_id = :task AND item_id IN {each:ids}"
        " AND created_at < :cutoff AND task_id <> :task{skip_locked}"
    )
    assert SQLITE.sql(statement) == (
        "DELETE FROM inbox WHERE task_id = :task AND item_id IN (SELECT value FROM json_each(:ids))"
        " AND created_at < :cutoff AND task_id <> :task"
    )
    assert POSTGRES.sql(statement) == (
        "DELETE FROM inbox WHERE task_id = $1 AND item_id IN (SELECT unnest($2::bigint[]))"
        " AND created_at < $3 AND task_id <> $1 FOR UPDATE SKIP LOCKED"
    )
    params = {"cutoff": 5.0, "ids": [1, 2], "task": "t"}
    assert POSTGRES.args(statement, params) == ("t", [1, 2], 5.0)
    assert SQLITE.args(statement, params) is params


def test_postgres_function_name_follows_its_statements() -> None:
    """A procedure's Postgres function is named by a digest of its body: other statements, other name."""
    name, create = CLAIM.function
    assert name.startswith("tb_claim_") and f"FUNCTION {name}(" in create
    other = type(CLAIM)(CLAIM.name, CLAIM.params, CLAIM.returns, CLAIM.steps[:-2] + CLAIM.steps[-1:])
    assert other.function[0] != name
    assert len({procedure.function[0] for procedure in PROCEDURES}) == len(PROCEDURES)


def test_typed_names_are_text_unless_a_kind_follows() -> None:
    assert typed("task_id now:real ids:ids") == (
        ("task_id", SqlType.TEXT),
        ("now", SqlType.REAL),
        ("ids", SqlType.IDS),
    )


def test_the_procedures_keep_their_postgres_functions() -> None:
    """The functions migrate() creates are named by their bodies: a refactor of how procedures are
    declared (shared builders, typed names) must not rename them. A change to what a procedure does
    renames its function on purpose; update this list with it."""
    assert [procedure.function[0] for procedure in PROCEDURES] == [
        "tb_claim_30326bd6b57c",
        "tb_create_task_75754bd617ee",
        "tb_save_run_324ee3fe9d3a",
        "tb_open_approval_9021c4a241c8",
        "tb_decide_approval_72be5a226afb",
        "tb_fire_follow_ups_f503ed40e71d",
        "tb_decide_ask_d483a464acad",
        "tb_settle_stop_2f52bda18217",
        "tb_decide_mcp_authorization_0d7fcde4502e",
    ]


async def test_sqlite_close_ends_its_database_thread(tmp_path: Path) -> None:
    """A SQLite store runs its database work on one thread of its own, which close() ends."""
    path = tmp_path / "t.db"
    store = SQLiteStore(path)

    def threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == f"threadbound-sqlite:{path}"]

    assert threads() == []  # nothing before first use
    await store.migrate()
    await store.ping()
    assert len(threads()) == 1
    await store.close()
    assert threads() == []


@pytest.mark.process
def test_a_sqlite_store_never_closed_does_not_block_exit(tmp_path: Path) -> None:
    """A process that used a SQLite store and never closed it still exits, with its claim kept."""
    script = textwrap.dedent(
        f"""
        import asyncio
        from storage import open_store

        async def main():
            store = open_store("sqlite:///{tmp_path}/t.db")
            await store.migrate()
            outcome = await store.claim_message(
                event_id="Ev1", channel="C1", ts="1.1", thread_ts="1.1", create=True, payload="{{}}", now=1.0
            )
            print(outcome.status)

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "claimed"), done.stderr


async def _v2_database(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migrate ``store`` to schema v2 only and write one claimed message the way v2 code did."""
    with monkeypatch.context() as patch:
        patch.setattr(storage.schema, "MIGRATIONS", storage.schema.MIGRATIONS[:2])
        await store.migrate()
    assert isinstance(store, SQLiteStore | PostgresStore)
    for sql, params in (
        ("INSERT INTO tasks (task_id, channel, thread_ts, created_at) VALUES (:t, 'C1', '1.1', :now)", {}),
        ("INSERT INTO conversations (channel, thread_ts, task_id) VALUES ('C1', '1.1', :t)", {}),
        (
            "INSERT INTO event_claims (event_id, channel, ts, claimed_at) VALUES ('Ev1', 'C1', '1.1', :now)",
            {},
        ),
        (
            "INSERT INTO message_claims (channel, ts, event_id, task_id, claimed_at)"
            " VALUES ('C1', '1.1', 'Ev1', :t, :now)",
            {},
        ),
    ):
        await store.database.execute(Statement(sql), {"t": "old-task", "now": T0, **params})


async def test_upgrade_to_one_claim_definition_keeps_earlier_claims(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A v2 database migrates to v3 with its claims intact: a redelivery of a message claimed under
    v2 is a duplicate naming its task, a new reply joins that task, and on Postgres the hand-written
    v2 claim function is gone while the generated ones exist."""
    store = await store_factory(migrate=False)
    await _v2_database(store, monkeypatch)
    await store.migrate()

    again = await store.claim_message(
        event_id="Ev2", channel="C1", ts="1.1", thread_ts="1.1", create=True, payload="{}", now=T0
    )
    assert (again.status, again.task_id) == ("duplicate", "old-task")
    reply = await store.claim_message(
        event_id="Ev3", channel="C1", ts="1.2", thread_ts="1.1", create=False, payload="{}", now=T0
    )
    assert (reply.status, reply.task_id, reply.created) == ("claimed", "old-task", False)

    if isinstance(store, PostgresStore):
        rows = await store.database.fetch(
            Statement(
                "SELECT proname FROM pg_proc"
                " WHERE pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = :schema)"
            ),
            {"schema": store.schema},
        )
        names = {row["proname"] for row in rows}
        assert "tb_claim_message" not in names
        assert {procedure.function[0] for procedure in PROCEDURES} <= names


def test_a_sqlite_claim_costs_the_same_however_many_tasks_exist() -> None:
    """A claim that creates a task runs the same number of SQLite VM steps whether 10 or 2,000
    conversations exist: no statement of it scans a table (counted steps, not time)."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA foreign_keys = ON")
    for _, statements in storage.schema.MIGRATIONS:
        for text in statements["sqlite"]:
            db.execute(text)

    def claim(n: int) -> None:
        params = {
            "event_id": f"Ev{n}",
            "channel": "C1",
            "ts": f"{n}.1",
            "thread_ts": f"{n}.1",
            "create": True,
            "payload": "{}",
            "now": T0,
            "claim_id": f"task{n}",
        }
        db.execute("BEGIN IMMEDIATE")
        assert procedure(db, (CLAIM, params))["status"] == "claimed"
        db.execute("COMMIT")

    def steps_of_one_claim(n: int) -> int:
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        db.set_progress_handler(count, 1)
        claim(n)
        db.set_progress_handler(None, 1)
        return steps

    for n in range(10):
        claim(n)
    few = steps_of_one_claim(10)
    for n in range(11, 2_000):
        claim(n)
    many = steps_of_one_claim(2_000)
    assert many < few * 1.2, (few, many)


def test_a_record_is_read_from_the_columns_named_like_its_fields() -> None:
    """``from_row``: SQLite's 0/1 becomes a bool, a list of strings comes as JSON text or an array,
    NULL stays None where the field allows it, and a field with a default may be missing."""
    row = {
        "task_id": "t1",
        "channel": "C1",
        "thread_ts": "",
        "transcript": memoryview(b"[]"),
        "enabled_tools": '["a", "b"]',
        "created_at": 5,
        "summary": "",
        "run_open": 1,
    }
    task = from_row(TaskRecord, row)
    assert task == TaskRecord("t1", "C1", "", b"[]", ("a", "b"), 5.0, "", True)
    assert from_row(TaskRecord, {**row, "enabled_tools": ["c"]}).enabled_tools == ("c",)
    usage = from_row(UsageRecord, {"day": "2026-12-01", "person": "U1", "channel": "C1", "requests": 2})
    assert usage == UsageRecord("2026-12-01", "U1", "C1", requests=2)
    claim = from_row(ClaimOutcome, {"status": "no_task", "task_id": None, "item_id": None, "created": 0})
    assert claim == ClaimOutcome("no_task")
    with pytest.raises(KeyError):
        from_row(TaskRecord, {"task_id": "t1"})


def test_a_record_types_readers_are_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolving a record's type hints compiles its string annotations: once per record type, not
    once per row read (every claim, every inbox poll reads rows)."""
    import storage._rows as rows

    resolved: list[type] = []
    real = rows.get_type_hints

    def counting(record: type) -> dict[str, object]:
        resolved.append(record)
        return real(record)

    monkeypatch.setattr(rows, "get_type_hints", counting)
    monkeypatch.setattr(rows, "_READERS", {})
    claim = {"status": "claimed", "task_id": "t1", "item_id": 1, "created": 1}
    for _ in range(5):
        assert from_row(ClaimOutcome, claim).task_id == "t1"
    assert resolved == [ClaimOutcome]


#: What every applied migration says, per dialect (sha256 of its statements, first 16 digits).
_APPLIED = {
    1: ("ea5478a83cdcaac7", "bd335970c708fcaa"),
    2: ("e3b0c44298fc1c14", "e7dd95f15af85f9a"),
    3: ("3045dc676130bc48", "5de04edc0e9a923b"),
    4: ("076013613613ad97", "076013613613ad97"),
    5: ("0f2449b335d83089", "0f2449b335d83089"),
    6: ("738e136b3e0abb41", "3b50ffe98b683dc6"),
    7: ("d98466e27b9ac387", "1510847cb3b4657a"),
    8: ("fee37674db4bbe73", "b817a19d2a9f1b06"),
    9: ("25a491ec751beb22", "25a491ec751beb22"),
    10: ("555eb563ade26142", "555eb563ade26142"),
    11: ("a95ddabf33adcc67", "cc80d49d121ef46d"),
    12: ("0d7f291d4682d355", "9e76245d0b30bce4"),
    13: ("ed68dc85e85e1544", "de9834039f299948"),
}


def test_applied_migrations_are_never_edited() -> None:
    """However a migration is written down (v1 once for both dialects, with their spellings as
    fields), the statements it runs stay those every existing database ran. A new migration is
    appended here with its digests."""

    def digest(statements: tuple[str, ...]) -> str:
        return hashlib.sha256("\n;\n".join(statements).encode()).hexdigest()[:16]

    migrations = storage.schema.MIGRATIONS
    assert {v: (digest(s["sqlite"]), digest(s["postgres"])) for v, s in migrations} == _APPLIED


def test_approvals_and_asks_are_cards_read_by_name() -> None:
    """Both records share CardRecord's fields (its decision typed by the record); a card row reads
    into either, the decision through its TypeVar's bound."""
    card = {"task_id": "t1", "requester": "U1", "channel": "C1", "thread_ts": "1.0", "card_ts": ""}
    card |= {"created_at": 1, "decision": "approved", "decided_by": "U2", "decided_at": 2}
    approval = {
        "approval_id": "a1",
        "tool_call_id": "c1",
        "tool": "deploy",
        "args": "{}",
        "card_effect": "e1",
    }
    ask = {"ask_id": "q1", "kind": "question", "text": "?", "details": "", "options": '["x"]'}
    read = from_row(ApprovalRecord, {**card, **approval, "executed_at": None})
    assert isinstance(read, CardRecord) and read.decision == "approved" and read.decided_at == 2.0
    asked = from_row(AskRecord, {**card, **ask, "only_requester": 1, "answer": "x"})
    assert isinstance(asked, CardRecord) and asked.options == ("x",) and asked.only_requester is True
