"""The HTTP edge on a thread of its own (``app.intake.edge_thread``), as ``serve`` runs it: the ack
path (signature, parse, claim, 200) on the edge's loop, wake-ups and everything that needs the
service's objects on the main loop; and what that needs of the stores and the ack gate."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.intake.edge_thread import SWITCH_INTERVAL, MainLoop
from app.intake.ingress import Ingress
from app.runs.ack_gate import AckGate
from storage import Store, StoreError
from storage.sqlite import SQLiteStore
from tests.conftest import StoreFactory
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import echo_model
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack


def _in_thread(work: Callable[[], Any]) -> Any:
    """``work()`` (a coroutine factory) run to its end on a new event loop in another thread."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def main() -> None:
        try:
            result.append(asyncio.run(work()))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=main)
    thread.start()
    return thread, result, errors


def _claim(n: int, now: float = 1.0) -> dict[str, Any]:
    return {
        "event_id": f"Ev{n}",
        "channel": "C1",
        "ts": f"{n}.000100",
        "thread_ts": f"{n}.000100",
        "create": True,
        "payload": "{}",
        "now": now,
    }


async def test_deliveries_are_claimed_on_the_edge_thread_and_woken_on_the_main_loop(
    slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mention over HTTP is claimed on the edge's thread, its run started on the main loop, answered."""
    main_thread = threading.get_ident()
    claimed_on: list[int] = []
    woken_on: list[int] = []
    real_claim = SQLiteStore.claim_message

    async def claim(self: SQLiteStore, **kwargs: Any) -> Any:
        claimed_on.append(threading.get_ident())
        return await real_claim(self, **kwargs)

    monkeypatch.setattr(SQLiteStore, "claim_message", claim)
    async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, edge_thread=True) as app:
        assert app.service is not None
        real_notify = app.service.runner.notify

        def notify(task_id: str, author: str | None = None, message: tuple[str, str] | None = None) -> None:
            woken_on.append(threading.get_ident())
            real_notify(task_id, author, message)

        monkeypatch.setattr(app.service.runner, "notify", notify)
        ts = slack.add_message("C1", "<@UBOT> hello there", user="U1")
        response = await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hello there", ts))
        assert response.status == 200
        await eventually(lambda: bool(slack.bot_messages("C1")))
        await app.idle()
    assert claimed_on and main_thread not in claimed_on
    assert woken_on and set(woken_on) == {main_thread}
    assert "hello there" in slack.bot_messages("C1")[-1]["text"]


async def test_the_edge_thread_shortens_the_interpreters_switch_interval(
    slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the edge serves, a thread waiting for the GIL (the edge's, after each socket call) gets it
    within SWITCH_INTERVAL rather than Python's 5 ms; a shorter interval the host set is kept."""
    chosen: list[float] = []
    before = sys.getswitchinterval()
    monkeypatch.setattr(sys, "setswitchinterval", chosen.append)
    async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, edge_thread=True):
        assert chosen == [min(before, SWITCH_INTERVAL)]
    assert SWITCH_INTERVAL <= 0.001


async def test_bolt_probes_and_metrics_answer_from_the_edge_thread(slack: FakeSlack, tmp_path: Path) -> None:
    """url_verification (through Bolt, on the main loop), /healthz, /readyz and /metrics."""
    async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, edge_thread=True) as app:
        response = await app.deliver(events.url_verification("c-123"))
        assert response.status == 200
        assert "c-123" in await response.text()
        assert (await app.get("/healthz")).status == 200
        ready = await app.get("/readyz")
        assert ready.status == 200
        assert (await ready.json())["ok"] is True
        metrics = await app.get("/metrics")
        assert metrics.status == 200
        assert "deliveries" in await metrics.text()


async def test_a_closed_store_answers_503_from_the_edge_thread(slack: FakeSlack, tmp_path: Path) -> None:
    """With the store gone the edge's claims fail as a 503 (Slack retries), not a hang or a 500."""
    async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, edge_thread=True) as app:
        assert app.service is not None
        await app.service.store.close()
        ts = slack.add_message("C1", "<@UBOT> anyone?", user="U1")
        async with asyncio.timeout(10):
            response = await app.deliver(events.app_mention("C1", "U1", "<@UBOT> anyone?", ts))
        assert response.status == 503
        assert (await app.get("/readyz")).status == 503


async def test_a_store_for_another_loop_claims_from_that_loop(store_factory: StoreFactory) -> None:
    """The main store and its sibling, used at once from two loops on two threads, both commit;
    closing the sibling leaves the main store open."""
    store = await store_factory()
    sibling = store.for_another_loop()

    async def other() -> list[str]:
        try:
            outcomes = await asyncio.gather(*(sibling.claim_message(**_claim(n)) for n in range(20)))
            return [o.status for o in outcomes]
        finally:
            await sibling.close()

    thread, result, errors = _in_thread(other)
    mine = await asyncio.gather(*(store.claim_message(**_claim(n)) for n in range(10, 30)))
    await asyncio.to_thread(thread.join)
    assert errors == []
    statuses = result[0] + [o.status for o in mine]
    # Ev10…Ev19 were sent from both loops: each claimed once, the other a duplicate.
    assert statuses.count("claimed") == 30
    assert statuses.count("duplicate") == 10
    await store.ping()


async def test_closing_the_main_sqlite_store_ends_its_sibling(tmp_path: Path) -> None:
    """A sibling whose database thread stopped fails with StoreError instead of waiting forever."""
    store: Store = SQLiteStore(tmp_path / "db.sqlite")
    await store.migrate()
    sibling = store.for_another_loop()
    await store.close()

    async def other() -> None:
        async with asyncio.timeout(5):
            await sibling.claim_message(**_claim(1))

    thread, _, errors = _in_thread(other)
    await asyncio.to_thread(thread.join)
    assert len(errors) == 1 and isinstance(errors[0], StoreError)


async def test_the_ack_gate_hears_of_deliveries_counted_on_another_thread() -> None:
    """Run starts on the main loop wait while the edge's thread has a delivery in flight."""
    gate = AckGate()
    counting = threading.Event()
    release = threading.Event()

    def deliver() -> None:
        with gate.acking():
            counting.set()
            release.wait(10)

    thread = threading.Thread(target=deliver)
    thread.start()
    await asyncio.to_thread(counting.wait, 10)
    assert gate.busy
    assert await gate.quiet(0.05) is False
    waiting = asyncio.create_task(gate.quiet(10))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    release.set()
    assert await waiting is True
    await asyncio.to_thread(thread.join)
    assert not gate.busy


async def test_calls_handed_to_the_main_loop_in_a_burst_cross_together_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wake-ups handed over while an earlier one still waits for the main loop ride on its crossing
    (one self-pipe write, not one per delivery), and every one runs, in the order handed over,
    even after one of them fails."""
    main = MainLoop()
    loop = asyncio.get_running_loop()
    crossings: list[object] = []
    real = loop.call_soon_threadsafe

    def counted(callback: Any, *args: Any, **kwargs: Any) -> Any:
        crossings.append(callback)
        return real(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    ran: list[tuple[str, int]] = []

    def fail(n: int) -> None:
        raise RuntimeError(f"wake-up {n} failed")

    def hand_over() -> None:  # the edge's thread, while the main loop is busy (joining it)
        for n in range(5):
            main.soon(lambda n: ran.append((threading.current_thread().name, n)), n)
        main.soon(fail, 5)
        main.soon(lambda: ran.append((threading.current_thread().name, 6)))

    thread = threading.Thread(target=hand_over, name="edge")
    thread.start()
    thread.join()  # blocks the main loop: nothing handed over can run yet
    await eventually(lambda: len(ran) == 6)
    main_name = threading.current_thread().name
    assert ran == [(main_name, n) for n in (0, 1, 2, 3, 4, 6)]
    assert len(crossings) == 1
    main.soon(lambda: ran.append((threading.current_thread().name, 7)))  # on the main loop: at once
    assert ran[-1] == (main_name, 7)


async def test_a_deliverys_log_line_and_metrics_are_done_on_the_main_loop(
    slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the edge's thread, what follows the 200 (the delivery's log line, a write, and its
    metrics) is handed to the main loop with the wake-up, so the edge goes on to the next ack."""
    main_thread = threading.get_ident()
    logged_on: list[int] = []
    real_log = Ingress._log

    def logged(self: Ingress, *args: Any) -> None:
        logged_on.append(threading.get_ident())
        real_log(self, *args)

    monkeypatch.setattr(Ingress, "_log", logged)
    async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, edge_thread=True) as app:
        ts = slack.add_message("C1", "<@UBOT> hello there", user="U1")
        response = await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hello there", ts))
        assert response.status == 200
        await eventually(lambda: bool(slack.bot_messages("C1")))
        await app.idle()
    assert logged_on and set(logged_on) == {main_thread}
