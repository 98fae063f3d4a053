"""The playground shows each thread's agent session and offers Stop, which stops the run in the app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.playground import GENERAL, Playground
from tests.support.models import Turn, scripted
from tests.test_playground import _conversation, _live, _session, _settings, _until

LONG = " ".join(f"Sentence {i} of an answer that takes its time." for i in range(300))


def _slow(turn: Turn) -> list[Any]:
    return [LONG] if turn.prompt else [""]


async def test_stop_on_the_page_stops_the_run_and_the_session_shows_it(tmp_path: Path) -> None:
    """A thread's session shows ``processing`` while the bot writes; POST /api/stop delivers Slack's
    ``agent_session_stopped``, the answer stops where it was, the session shows ``active``, and the
    person who pressed Stop sees the bot's private note; a Stop on a thread without a session is a 400."""
    model = scripted(_slow, chunk=30, chunk_delay=0.03)
    async with Playground(_settings(tmp_path), model=model) as pg, _session(pg.page_token) as http:
        stream = _live(http, pg.url)
        async with http.post(
            f"{pg.url}api/messages", json={"as": "U0BOB", "channel": GENERAL, "text": "@threadbound go"}
        ) as response:
            root = (await response.json())["ts"]

        def working(state: dict[str, Any]) -> bool:
            session = _conversation(state, GENERAL).get("sessions", {}).get(root)
            return session is not None and session["status"] == "processing" and len(pg.slack.streams) == 1

        await _until(stream, working)
        async with http.post(
            f"{pg.url}api/stop", json={"as": "U0BOB", "channel": GENERAL, "thread_ts": root}
        ) as response:
            assert response.status == 200 and (await response.json())["status"] == 200

        def stopped(state: dict[str, Any]) -> bool:
            conversation = _conversation(state, GENERAL)
            return conversation["sessions"][root]["status"] == "active" and bool(conversation["ephemerals"])

        state = await _until(stream, stopped)
        [live] = pg.slack.streams.values()
        assert live.state == "stopped" and 0 < len(live.text) < len(LONG)
        assert [n["user"] for n in _conversation(state, GENERAL)["ephemerals"]] == ["U0BOB"]
        async with http.post(
            f"{pg.url}api/stop", json={"as": "U0BOB", "channel": GENERAL, "thread_ts": "1.000"}
        ) as response:
            assert response.status == 400
