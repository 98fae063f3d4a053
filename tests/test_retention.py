"""Retention: the runner's sweep prunes ingress claim keys older than CLAIM_RETENTION_DAYS, hourly."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from storage import Store
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import echo_model
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

DAY = 86_400.0


async def _keys_present(store: Store, *, event_id: str, channel: str, ts: str) -> bool:
    """Whether a claim key of the message is recorded (a duplicate), probing without side effects
    on the message's task: the probe names a conversation that does not exist and create=False."""
    probe = await store.claim_message(
        event_id=event_id,
        channel=channel,
        ts=ts,
        thread_ts="no-such-thread",
        create=False,
        payload="{}",
        now=time.time() + 100 * DAY,
    )
    return probe.status == "duplicate"


async def test_the_sweep_prunes_old_claim_keys_at_most_hourly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """CLAIM_RETENTION_DAYS reaches the runner; the sweep prunes keys older than it, at most once an
    hour by the runner's clock, keeps younger ones and logs how many it dropped."""
    caplog.set_level(logging.INFO, logger="app.runs.scheduler")
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack, model=echo_model(), data_dir=tmp_path, sweep_interval=0.01, claim_retention_days=1.0
        ) as app:
            assert app.service is not None
            runner, store = app.service.runner, app.service.store
            assert runner.claim_retention == DAY
            now = [time.time()]
            runner.clock = lambda: now[0]
            calls: list[tuple[float, int]] = []
            prune = store.prune_claims

            async def spy(*, older_than: float) -> int:
                deleted = await prune(older_than=older_than)
                calls.append((older_than, deleted))
                return deleted

            monkeypatch.setattr(store, "prune_claims", spy)
            attempts = [0]  # every sweep asks the runner whether it is time to prune
            attempt = runner.prune_claims

            async def counted() -> int | None:
                attempts[0] += 1
                return await attempt()

            monkeypatch.setattr(runner, "prune_claims", counted)

            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            response = await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts, event_id="EvOld"))
            assert response.status == 200
            await app.idle()
            assert await _keys_present(store, event_id="EvOld", channel="C1", ts="1.1")

            # Two hours on: time for a prune, but the key is younger than a day and stays.
            now[0] += 2 * 3600
            await eventually(lambda: any(cutoff == now[0] - DAY for cutoff, _ in calls))
            assert calls[-1] == (now[0] - DAY, 0)
            assert await _keys_present(store, event_id="EvOld", channel="C1", ts="1.1")
            count, swept = len(calls), attempts[0]
            await eventually(lambda: attempts[0] >= swept + 5)  # more sweeps, all within the hour
            assert len(calls) == count

            # Two days on: the event key and the message key go.
            now[0] += 2 * DAY
            await eventually(lambda: any(cutoff == now[0] - DAY for cutoff, _ in calls))
            assert calls[-1] == (now[0] - DAY, 2)
            assert not await _keys_present(store, event_id="EvOld", channel="C1", ts="1.1")
            assert not await _keys_present(store, event_id="EvProbe", channel="C1", ts=ts)
            assert any("pruned 2 claim keys" in r.getMessage() for r in caplog.records)
