"""A randomized fault schedule: a workload run by real server processes while faults land at random.

:func:`plan` turns a seed into a schedule: the workload's conversations (``chaos_workload``) and the
faults, each at a moment of the run — the emulator applying a write late while the caller's
connection is cut, applying it and answering 5xx or dropping the connection, 429 bursts; event
deliveries late or duplicated (``deliveries``); SIGKILL (and a restart a moment later) and
SIGSTOP/SIGCONT of an instance; the database's sessions of an instance ended, the database paused
for seconds (a proxy in front of Postgres, an exclusive lock on SQLite), statements on a table
failing for a moment. :class:`Chaos` runs it — two instances on Postgres (each behind its own proxy),
one on SQLite — then heals everything, waits for the store to settle and hands the emulator's state,
the store and the logs to the checker (``chaos_checks``). The same seed gives the same schedule
(the processes' timing is the machine's).

Run as many seeds as you like::

    python -m tests.support.fault_schedule --seeds 50 --store postgres   # TEST_DATABASE_URL set
    python -m tests.support.fault_schedule --seed 7 --store sqlite --keep  # one seed, logs kept
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import psutil

from threadbound_emulator import FakeSlack

from . import events
from .chaos_checks import Outcome, StoreState, check
from .chaos_workload import AGAIN, AGAIN_KINDS, KINDS, Conversation, describe, marker, script
from .deliveries import Deliverer
from .fake_model import FakeOpenAI
from .postgres import drop_schema, new_schema
from .process import ServerProcess, server_env
from .tcp_proxy import TcpProxy
from .waiting import eventually

STORES = ("sqlite", "postgres")
#: The writes a Slack fault may hit.
SLACK_WRITES = (
    "chat.postMessage",
    "chat.update",
    "chat.delete",
    "reactions.add",
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
    "files.completeUploadExternal",
)
#: Tables a statement may fail on (checkpoint and save, journal, inbox, asks, follow-ups).
TABLES = ("tasks", "effects", "inbox", "asks", "follow_ups")
#: Seconds of the run faults land in.
SPAN = 24.0
#: Seconds the model takes to answer each request (a run spans several of them, so faults land mid-run).
MODEL_DELAY = 0.3
#: Seconds one conversation may take, from its mention to its last answer.
CONVERSATION_WITHIN = 90.0
#: ``WRITE_IN_FLIGHT``: the default, so a takeover waits out writes still on their way as in production
#: (every ``slack.late`` fault applies its write well within it).
WRITE_IN_FLIGHT = 35.0
#: Seconds the store may take to settle once every fault is healed.
SETTLE_WITHIN = 60.0


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: ``kind`` at ``at`` s into the run, on ``target`` (an instance, a method,
    a table), for ``seconds`` (a delay, a downtime, a pause), ``times`` in a row (a 429 burst)."""

    at: float
    kind: str
    target: str = ""
    seconds: float = 0.0
    times: int = 1

    def __str__(self) -> str:
        extra = f" {self.seconds:.1f}s" if self.seconds else ""
        extra += f" x{self.times}" if self.times > 1 else ""
        return f"{self.at:5.1f}s {self.kind} {self.target}{extra}"


@dataclass(frozen=True)
class Plan:
    seed: int
    store: str
    #: ``STREAM`` for every instance: answers streamed (``auto``) or posted (``off``).
    stream: str
    conversations: tuple[Conversation, ...]
    faults: tuple[Fault, ...]
    #: ``THREADBOUND_CRASH_AT`` for the first instance's first life (``storage/crashpoints.py``): it
    #: kills itself there and is restarted, for a directed plan that needs a kill at an exact point.
    crash_at: str = ""
    #: Seconds one conversation may take, from its mention to its last answer.
    within: float = CONVERSATION_WITHIN

    @property
    def instances(self) -> tuple[str, ...]:
        return ("a", "b") if self.store == "postgres" else ("a",)

    def describe(self) -> str:
        lines = [
            f"fault schedule: seed {self.seed}, store {self.store}, STREAM={self.stream}"
            + (f", THREADBOUND_CRASH_AT={self.crash_at}" if self.crash_at else ""),
            f"  conversations: {describe(list(self.conversations))}",
            *(f"  {fault}" for fault in self.faults),
        ]
        return "\n".join(lines)


def plan(seed: int, store: str) -> Plan:
    """The schedule of ``seed`` on ``store``: every kind of conversation once and two more, starting
    in a seeded order within :data:`SPAN` seconds, and seven to eleven faults in the same seconds."""
    rng = random.Random(f"{seed}:{store}")
    kinds = [*KINDS, rng.choice(KINDS), rng.choice(KINDS)]
    rng.shuffle(kinds)
    conversations = tuple(
        Conversation(
            f"c{i + 1}", kind, round(rng.uniform(0, SPAN - 6), 1), kind in AGAIN_KINDS and rng.random() < 0.6
        )
        for i, kind in enumerate(kinds)
    )
    instances = ("a", "b") if store == "postgres" else ("a",)
    menu = ["slack.late", "slack.late", "slack.5xx", "slack.drop", "slack.429", "kill", "stop"]
    menu += ["db.pause", "db.fail", "db.fail"] + (
        ["pg.terminate", "pg.terminate"] if store == "postgres" else []
    )
    faults = []
    for _ in range(rng.randint(7, 11)):
        kind = rng.choice(menu)
        at = round(rng.uniform(0.5, SPAN), 1)
        if kind.startswith("slack."):
            method = rng.choice(SLACK_WRITES)
            seconds = round(rng.uniform(1.5, 4.0), 1) if kind == "slack.late" else 0.0
            faults.append(Fault(at, kind, method, seconds, rng.randint(2, 4) if kind == "slack.429" else 1))
        elif kind in ("kill", "stop", "pg.terminate"):
            seconds = round(rng.uniform(1.0, 5.0), 1) if kind != "pg.terminate" else 0.0
            faults.append(Fault(at, kind, rng.choice(instances), seconds))
        elif kind == "db.pause":
            faults.append(Fault(at, kind, "", round(rng.uniform(2.0, 6.0), 1)))
        else:
            faults.append(Fault(at, kind, rng.choice(TABLES), round(rng.uniform(0.3, 1.0), 1)))
    return Plan(
        seed, store, rng.choice(("auto", "off")), conversations, tuple(sorted(faults, key=lambda f: f.at))
    )


def _choice(seed: int, label: str) -> random.Random:
    """A random source of its own for one delivery, so it does not depend on the order of events."""
    return random.Random(int(hashlib.sha256(f"{seed}:{label}".encode()).hexdigest()[:16], 16))


@dataclass
class Instance:
    """One app instance across its incarnations (a kill, then a restart)."""

    name: str
    env: dict[str, str]
    workdir: Path
    proxy: TcpProxy | None = None
    server: ServerProcess | None = None
    incarnation: int = 0
    #: ``(log path, the time it was killed or None)``, per incarnation.
    lives: list[tuple[Path, float | None]] = field(default_factory=list)
    stopped: bool = False

    @property
    def up(self) -> bool:
        return (
            self.server is not None and self.server.proc is not None and self.server.proc.returncode is None
        )

    async def start(self, **extra: str) -> None:
        self.incarnation += 1
        log = self.workdir / f"{self.name}-{self.incarnation}.log"
        env = {**self.env, **extra}
        self.server = ServerProcess(env, cwd=self.workdir, log_path=log, name=f"instance {self.name}")
        self.lives.append((log, None))
        await self.server.start()

    def kill(self) -> None:
        assert self.server is not None
        self.resume()
        self.server.kill()
        self.lives[-1] = (self.lives[-1][0], time.time())

    def _family(self) -> list[psutil.Process]:
        if not self.up:
            return []
        assert self.server is not None
        try:
            parent = psutil.Process(self.server.pid)
            return [parent, *parent.children(recursive=True)]
        except psutil.Error:
            return []

    def pause(self) -> None:
        for process in self._family():
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        if self.stopped:
            for process in self._family():
                with contextlib.suppress(psutil.Error):
                    process.send_signal(signal.SIGCONT)
        self.stopped = False

    async def stop(self) -> None:
        self.resume()
        if self.server is not None:
            await self.server.stop()


class Database:
    """The store the instances share, as the test reaches it: queries, and its faults."""

    def __init__(self, store: str, url: str, base: str = "", schema: str = "") -> None:
        self.store, self.url, self.base, self.schema = store, url, base, schema
        self._lock_thread: threading.Thread | None = None

    @property
    def sqlite_path(self) -> str:
        return self.url.removeprefix("sqlite:///")

    async def rows(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        """``sql`` with ``?`` placeholders, on either store."""
        if self.store == "sqlite":
            return await asyncio.to_thread(self._sqlite_rows, sql, args)
        parts = sql.split("?")
        sql = "".join(p + (f"${i + 1}" if i < len(parts) - 1 else "") for i, p in enumerate(parts))
        conn = await asyncpg.connect(self.base, server_settings={"search_path": self.schema})
        try:
            return [dict(r) for r in await conn.fetch(sql, *args)]
        finally:
            await conn.close()

    def _sqlite_rows(self, sql: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
        with contextlib.closing(sqlite3.connect(self.sqlite_path, timeout=30)) as db:
            db.row_factory = sqlite3.Row
            with db:
                return [dict(r) for r in db.execute(sql, args).fetchall()]

    async def install_faults(self) -> None:
        """A table ``chaos_arm`` and a trigger on each of :data:`TABLES`: while a row names the table
        with an ``until`` still ahead, every statement writing it fails."""
        if self.store == "sqlite":
            now = "((julianday('now') - 2440587.5) * 86400.0)"
            statements = ["CREATE TABLE chaos_arm (tbl TEXT PRIMARY KEY, until REAL NOT NULL)"]
            for table in TABLES:
                for op in ("INSERT", "UPDATE", "DELETE"):
                    statements.append(
                        f"CREATE TRIGGER chaos_{table}_{op.lower()} BEFORE {op} ON {table} WHEN EXISTS"
                        f" (SELECT 1 FROM chaos_arm WHERE tbl = '{table}' AND until > {now})"
                        f" BEGIN SELECT RAISE(ABORT, 'chaos: a statement on {table} failed'); END"
                    )
            await asyncio.to_thread(self._sqlite_script, statements)
            return
        statements = [
            "CREATE TABLE chaos_arm (tbl TEXT PRIMARY KEY, until DOUBLE PRECISION NOT NULL)",
            f"""CREATE FUNCTION chaos_fail() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF EXISTS (SELECT 1 FROM "{self.schema}".chaos_arm WHERE tbl = TG_TABLE_NAME
                         AND until > extract(epoch FROM clock_timestamp())) THEN
                RAISE EXCEPTION 'chaos: a statement on % failed', TG_TABLE_NAME;
              END IF;
              IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
              RETURN NEW;
            END $$""",
            *(
                f"CREATE TRIGGER chaos_fail BEFORE INSERT OR UPDATE OR DELETE ON {table}"
                " FOR EACH ROW EXECUTE FUNCTION chaos_fail()"
                for table in TABLES
            ),
        ]
        conn = await asyncpg.connect(self.base, server_settings={"search_path": self.schema})
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    def _sqlite_script(self, statements: list[str]) -> None:
        with contextlib.closing(sqlite3.connect(self.sqlite_path, timeout=30)) as db:
            with db:
                for statement in statements:
                    db.execute(statement)

    async def fail(self, table: str, seconds: float) -> None:
        """Statements writing ``table`` fail for the next ``seconds``."""
        until = time.time() + seconds
        await self.rows("DELETE FROM chaos_arm WHERE tbl = ?", table)
        await self.rows("INSERT INTO chaos_arm (tbl, until) VALUES (?, ?)", table, until)

    async def disarm(self) -> None:
        await self.rows("DELETE FROM chaos_arm")

    def lock(self, seconds: float) -> None:
        """SQLite: hold the database's write lock for ``seconds`` (in a thread of this process)."""

        def hold() -> None:
            with contextlib.closing(
                sqlite3.connect(self.sqlite_path, timeout=30, isolation_level=None)
            ) as db:
                db.execute("BEGIN EXCLUSIVE")
                time.sleep(seconds)
                db.execute("ROLLBACK")

        self._lock_thread = threading.Thread(target=hold, daemon=True)
        self._lock_thread.start()

    async def make_due(self, task_id: str) -> int:
        """Make the task's pending follow-ups due now (the tool takes a minute at least)."""
        rows = await self.rows(
            "UPDATE follow_ups SET due_at = ? WHERE task_id = ? AND state = 'pending' RETURNING follow_up",
            time.time() - 1,
            task_id,
        )
        return len(rows)

    async def task_of(self, root: str) -> str | None:
        rows = await self.rows(
            "SELECT task_id FROM conversations WHERE channel = 'C1' AND thread_ts = ?", root
        )
        return str(rows[0]["task_id"]) if rows else None

    async def state(self) -> StoreState:
        tasks = {
            r["thread_ts"]: r["task_id"]
            for r in await self.rows("SELECT task_id, thread_ts FROM conversations")
        }
        open_runs = {r["task_id"] for r in await self.rows("SELECT task_id FROM tasks WHERE run_open")}
        inbox = {
            r["task_id"]: r["n"]
            for r in await self.rows("SELECT task_id, count(*) AS n FROM inbox GROUP BY task_id")
        }
        effects = [
            dict(r)
            for r in await self.rows("SELECT task_id, tool, effect_id FROM effects WHERE state = 'open'")
        ]
        asks = await self.rows("SELECT ask_id, task_id, kind, card_ts, decision, answer FROM asks")
        follow_ups = await self.rows("SELECT follow_up, task_id, state, fire_id FROM follow_ups")
        return StoreState(tasks, open_runs, inbox, effects, asks, follow_ups)


class Chaos:
    """One run of a :class:`Plan`; :meth:`run` returns the checker's :class:`Outcome`."""

    def __init__(self, plan: Plan, workdir: Path, db: Database, out: Any = sys.stdout) -> None:
        self.plan = plan
        self.workdir = workdir
        self.db = db
        self.out = out
        self.instances: list[Instance] = []
        self.notes: list[str] = []
        self._t0 = 0.0
        self._background: set[asyncio.Task[Any]] = set()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def note(self, text: str) -> None:
        line = f"{time.monotonic() - self._t0:6.1f}s {text}"
        self.notes.append(line)
        self.say(f"  {line}")

    async def run(self) -> Outcome:
        self.say(self.plan.describe())
        async with (
            FakeSlack() as slack,
            FakeOpenAI(script, delay=MODEL_DELAY) as llm,
            aiohttp.ClientSession() as http,
            contextlib.AsyncExitStack() as stack,
        ):
            self.slack = slack
            slack.add_channel("C1", "general")
            slack.add_user("U1", "alice", display_name="Alice")
            slack.add_file("F1", "report.txt", "text/plain", b"the report\n" * 10)
            stack.push_async_callback(self._stop_all)
            await self._start_instances(slack, llm)
            self.deliverer = Deliverer(http, self._urls, self._pick)
            stack.push_async_callback(self.deliverer.cancel)
            self._t0 = time.monotonic()
            injector = asyncio.create_task(self._inject())
            drivers = [asyncio.create_task(self._drive(c)) for c in self.plan.conversations]
            await asyncio.gather(*drivers, return_exceptions=True)
            await asyncio.gather(injector, return_exceptions=True)  # every fault has landed
            last = max((f.at + f.seconds for f in self.plan.faults), default=0.0)
            await asyncio.sleep(max(0.0, self._t0 + last + 1.0 - time.monotonic()))
            await self._heal()
            settled = await self._settle()
            state = await self.db.state()
            for delivery in self.deliverer.deliveries:
                if not delivery.acked or len(delivery.attempts) > 1:
                    what = delivery.body.get("type", "")
                    what = (delivery.body.get("event") or {}).get("text", what)[:60]
                    self.notes.append(f"delivery of {what!r}: {delivery.attempts}, acked={delivery.acked}")
            self.notes += [f"ephemeral to {user}: {text[:100]!r}" for _, user, _, text in slack.ephemerals]
            logs = [life for instance in self.instances for life in instance.lives]
            outcome = check(self.plan.conversations, slack, state, logs)
            if not settled:
                outcome.notes.append("the store did not settle within the time allowed")
            outcome.notes[:0] = self.notes
            outcome.llm_requests = len(llm.requests)
            (self.workdir / "requests.json").write_text(json.dumps(llm.requests, indent=1))
            (self.workdir / "slack.json").write_text(json.dumps(slack.messages("C1"), indent=1))
            (self.workdir / "notes.txt").write_text(f"{self.plan.describe()}\n" + "\n".join(outcome.notes))
            return outcome

    # -- instances -----------------------------------------------------------------------------
    async def _start_instances(self, slack: FakeSlack, llm: FakeOpenAI) -> None:
        env = server_env(
            slack,
            llm,
            SLACK_FILE_ORIGINS=slack.files_origin,
            STREAM=self.plan.stream,
            LOG_FORMAT="json",
            WRITE_IN_FLIGHT=str(WRITE_IN_FLIGHT),
        )
        for name in self.plan.instances:
            instance_env = {
                **env,
                "DATA_DIR": str(self.workdir / ("data" if self.db.store == "sqlite" else name)),
            }
            proxy = None
            if self.db.store == "postgres":
                parts = urlsplit(self.db.url)
                proxy = await TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432).start()
                netloc = (
                    f"{parts.username}@127.0.0.1:{proxy.port}"
                    if parts.username
                    else f"127.0.0.1:{proxy.port}"
                )
                instance_env["DATABASE_URL"] = urlunsplit(parts._replace(netloc=netloc))
            self.instances.append(Instance(name, instance_env, self.workdir, proxy))
        for instance in self.instances:
            crash = (
                {"THREADBOUND_CRASH_AT": self.plan.crash_at}
                if self.plan.crash_at and instance is self.instances[0]
                else {}
            )
            await instance.start(**crash)
        await self.db.install_faults()
        if self.plan.crash_at:
            self._later(0.0, self._supervise)

    async def _supervise(self) -> None:
        """Restart the instance armed with ``crash_at`` once it has killed itself."""
        instance = self.instances[0]
        assert instance.server is not None
        await instance.server.wait(within=3 * CONVERSATION_WITHIN)
        instance.lives[-1] = (instance.lives[-1][0], time.time())
        self.note(f"{instance.name} killed itself at {self.plan.crash_at}")
        await self._restart(instance)

    def _urls(self) -> list[str]:
        return [i.server.url for i in self.instances if i.up and i.server is not None]

    def _pick(self, n: int) -> int:
        return random.randrange(n)  # which instance the load balancer picks: not part of the schedule

    async def _stop_all(self) -> None:
        for instance in self.instances:
            with contextlib.suppress(Exception):
                await instance.stop()
            if instance.proxy is not None:
                await instance.proxy.stop()
        for task in list(self._background):
            task.cancel()

    # -- faults --------------------------------------------------------------------------------
    async def _inject(self) -> None:
        for fault in self.plan.faults:
            delay = self._t0 + fault.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.note(f"fault: {fault}")
            self._later(0.0, lambda fault=fault: self._apply_noted(fault))

    async def _apply_noted(self, fault: Fault) -> None:
        """Apply ``fault`` (in a task of its own: one waiting for a locked database holds no other)."""
        try:
            await self._apply(fault)
        except Exception as exc:  # a fault that could not land is noted, not fatal
            self.note(f"fault {fault.kind} could not be applied: {exc!r}")

    def _later(self, seconds: float, action: Any) -> None:
        async def run() -> None:
            await asyncio.sleep(seconds)
            await action()

        task = asyncio.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _instance(self, name: str) -> Instance:
        return next(i for i in self.instances if i.name == name)

    async def _apply(self, fault: Fault) -> None:
        slack = self.slack
        if fault.kind == "slack.late":
            slack.late(fault.target, fault.seconds)
        elif fault.kind == "slack.late.kill":  # directed plans only (one instance)
            before = slack.count(fault.target)
            slack.late(fault.target, fault.seconds)
            self._later(0.0, lambda: self._kill_when_cut(fault.target, before))
        elif fault.kind == "slack.5xx":
            slack.fail(fault.target, "internal_error", status=500, applied=True)
        elif fault.kind == "slack.drop":
            slack.drop(fault.target)
        elif fault.kind == "slack.429":
            slack.fail(fault.target, "ratelimited", status=429, retry_after=1, times=fault.times)
        elif fault.kind == "kill":
            instance = self._instance(fault.target)
            if instance.up:
                instance.kill()
                self._later(fault.seconds, lambda: self._restart(instance))
        elif fault.kind == "stop":
            instance = self._instance(fault.target)
            if instance.up and not instance.stopped:
                instance.pause()

                async def cont() -> None:
                    instance.resume()
                    self.note(f"SIGCONT {instance.name}")

                self._later(fault.seconds, cont)
        elif fault.kind == "pg.terminate":
            await self._terminate(self._instance(fault.target))
        elif fault.kind == "db.pause":
            await self._pause_db(fault.seconds)
        elif fault.kind == "db.fail":
            await self.db.fail(fault.target, fault.seconds)

    async def _kill_when_cut(self, method: str, before: int) -> None:
        """SIGKILL the first instance once Slack has cut a ``method`` request it will apply late (the
        process dies with its write on the way), and restart it."""
        await eventually(lambda: self.slack.count(method) > before and self.slack.pending_late > 0, 60.0)
        instance = self.instances[0]
        if instance.up:
            instance.kill()
            self.note(f"killed {instance.name} with its {method} on the way")
            await self._restart(instance)

    async def _restart(self, instance: Instance) -> None:

        if instance.server is not None and instance.server.proc is not None:
            with contextlib.suppress(Exception):
                await instance.server.wait(within=10)
        for _ in range(3):
            if instance.up:
                return
            try:
                await instance.start()
                self.note(f"restarted {instance.name}")
            except Exception as exc:  # killed again while starting: start it once more
                self.note(f"restart of {instance.name} failed: {exc!r}"[:200])

    async def _terminate(self, instance: Instance) -> None:
        assert instance.proxy is not None
        ports = instance.proxy.upstream_ports()
        conn = await asyncpg.connect(self.db.base)
        try:
            ended = await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND client_port = ANY($1::int[])",
                ports,
            )
        finally:
            await conn.close()
        self.note(f"ended {ended} sessions of {instance.name}")

    async def _pause_db(self, seconds: float) -> None:
        if self.db.store == "sqlite":
            self.db.lock(seconds)
            return
        for instance in self.instances:
            assert instance.proxy is not None
            instance.proxy.pause()

        async def resume() -> None:
            for instance in self.instances:
                assert instance.proxy is not None
                instance.proxy.resume()
            self.note("database resumed")

        self._later(seconds, resume)

    async def _heal(self) -> None:
        """Every fault undone: stopped instances continued, the database answering, killed ones
        restarted, no Slack fault pending, late writes applied, every delivery ended."""
        self.note("healing")
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for instance in self.instances:
            instance.resume()
            if instance.proxy is not None:
                instance.proxy.resume()
            if not instance.up:
                await self._restart(instance)
        self.slack.clear_faults()
        with contextlib.suppress(Exception):
            await self.db.disarm()
        await self.slack.settle_late()
        await self.deliverer.settle()

    async def _settle(self) -> bool:
        """Wait until no run is open, no inbox item pending and no journal entry open."""
        deadline = time.monotonic() + SETTLE_WITHIN
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                state = await self.db.state()
                if not state.open_runs and not any(state.inbox.values()) and not state.open_effects:
                    await asyncio.sleep(2.0)  # what a run still in flight would post
                    return True
            await asyncio.sleep(0.5)
        return False

    # -- the workload --------------------------------------------------------------------------
    def _send(self, conversation: Conversation, label: str, body: dict[str, Any]) -> None:
        rng = _choice(self.plan.seed, f"{conversation.key}:{label}")
        late = round(rng.uniform(0.5, 3.0), 1) if rng.random() < 0.25 else 0.0
        duplicate = round(rng.uniform(0.2, 3.0), 1) if rng.random() < 0.25 else None
        if late or duplicate is not None:
            again = f", duplicated {duplicate}s after" if duplicate is not None else ""
            self.note(f"delivery {conversation.key}:{label}: late {late}s{again}")
        self.deliverer.send(body, late=late, duplicate_after=duplicate)

    def _shown(self, root: str) -> list[dict[str, Any]]:
        return [m for m in self.slack.bot_messages("C1") if m.get("thread_ts") == root]

    async def _until(self, what: str, conversation: Conversation, test: Any, deadline: float) -> Any:
        while time.monotonic() < deadline:
            found = test()
            if asyncio.iscoroutine(found):
                found = await found
            if found:
                return found
            await asyncio.sleep(0.1)
        self.note(f"{conversation.key}: gave up waiting for {what}")
        raise TimeoutError(what)

    def _seen(self, root: str, key: str, stage: str) -> bool:
        return any(marker(key, stage) in json.dumps(m) for m in self._shown(root))

    async def _drive(self, c: Conversation) -> None:
        await asyncio.sleep(c.start)
        deadline = time.monotonic() + self.plan.within
        files = [self.slack.file_object("F1")] if c.kind == "steps" else None
        root = self.slack.add_message("C1", c.mention, user="U1", files=files)
        self._send(c, "mention", events.app_mention("C1", "U1", c.mention, root, files=files))
        self._send(c, "message", events.message("C1", "U1", c.mention, root, files=files))
        try:
            if c.kind in ("ask", "approval"):
                card = await self._until("the card", c, lambda: self._card(root), deadline)
                click = self._click(card, root)
                self.note(f"{c.key}: clicks {click['actions'][0]['action_id']} on the card {card['ts']}")
                self._send(c, "click", click)
            for stage in c.stages():
                if stage == "after-follow-up":  # due once the first answer is in (the tool: 1 min at least)
                    await self._until("the follow-up", c, lambda: self._make_due(root), deadline)
                if stage == "again":
                    follow = self.slack.add_message("C1", AGAIN, user="U1", thread_ts=root)
                    self._send(c, "again", events.message("C1", "U1", AGAIN, follow, thread_ts=root))
                await self._until(f"{stage}", c, lambda stage=stage: self._seen(root, c.key, stage), deadline)
        except TimeoutError:
            return

    def _card(self, root: str) -> dict[str, Any] | None:
        for message in self._shown(root):
            if any(b.get("type") == "actions" for b in message.get("blocks") or []):
                return message
        return None

    def _click(self, card: dict[str, Any], root: str) -> dict[str, Any]:
        button = next(e for b in card["blocks"] if b["type"] == "actions" for e in b["elements"])
        return events.block_actions(
            channel="C1",
            user="U1",
            message_ts=card["ts"],
            thread_ts=root,
            action_id=button["action_id"],
            value=button["value"],
        )

    async def _make_due(self, root: str) -> bool:
        with contextlib.suppress(Exception):
            task = await self.db.task_of(root)
            return bool(task and await self.db.make_due(task))
        return False


async def run_seed(seed: int, store: str, workdir: Path, out: Any = sys.stdout) -> Outcome:
    """Run ``seed``'s schedule on ``store`` in ``workdir``."""
    return await run_plan(plan(seed, store), workdir, out)


async def run_plan(schedule: Plan, workdir: Path, out: Any = sys.stdout) -> Outcome:
    """Run ``schedule`` in ``workdir`` (Postgres: a fresh schema on ``TEST_DATABASE_URL``, dropped
    after)."""
    if schedule.store == "sqlite":
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        db = Database("sqlite", f"sqlite:///{workdir / 'data' / 'threadbound.db'}")
        return await Chaos(schedule, workdir, db, out).run()
    base = os.environ.get("TEST_DATABASE_URL", "")
    if not base:
        raise RuntimeError("TEST_DATABASE_URL is not set")
    schema = new_schema(base, "tb_chaos")
    try:
        db = Database("postgres", schema.url, base, schema.name)
        return await Chaos(schedule, workdir, db, out).run()
    finally:
        await drop_schema(base, schema.name)


#: The log line of a run that waited out writes a dead or fenced owner may still have had on their way.
TAKEOVER_WAIT = "interrupted writes settled after waiting out those still on their way"


def takeover_waits(workdir: Path) -> list[float]:
    """Seconds each takeover (or resume) of the seed waited for writes still on their way, from the
    instances' logs in ``workdir``."""
    waits = []
    for log in sorted(workdir.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("message") == TAKEOVER_WAIT:
                waits.append(float(record.get("waited_ms") or 0) / 1000)
    return waits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.fault_schedule", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--store", choices=STORES, default="sqlite")
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds to run")
    parser.add_argument("--first", type=int, default=1, help="the first seed")
    parser.add_argument("--seed", type=int, action="append", help="run this seed (repeatable)")
    parser.add_argument(
        "--keep", action="store_true", help="keep every seed's logs (a failing seed's are always kept)"
    )
    args = parser.parse_args(argv)
    ServerProcess.preloaded = True  # restarts as quick as under pytest (tests/support/preloaded.py)
    seeds = args.seed or list(range(args.first, args.first + args.seeds))
    failing: dict[int, list[str]] = {}
    longest = 0.0
    for seed in seeds:
        workdir = Path(tempfile.mkdtemp(prefix=f"tb-chaos-{args.store}-{seed}-"))
        outcome = asyncio.run(run_seed(seed, args.store, workdir))
        print(outcome.report(), flush=True)
        waits = takeover_waits(workdir)
        longest = max([longest, *waits])
        if waits:
            print(f"  takeovers waited for writes on their way: {', '.join(f'{w:.1f}s' for w in waits)}")
        if outcome.failed:
            failing[seed] = sorted(outcome.failed)
        if args.keep or outcome.failed:
            print(f"  logs: {workdir}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{len(seeds) - len(failing)} of {len(seeds)} seeds ran clean on {args.store}")
    print(f"  the longest wait of a takeover for writes on their way: {longest:.1f}s")
    for seed, checks in failing.items():
        print(f"  seed {seed}: {', '.join(checks)}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
