"""The playground as a newcomer first sees it: the DM's 👀, line breaks, emoji, statuses and examples."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from app.playground import GENERAL, Playground
from app.playground.demo import EXAMPLES, demo_model
from app.playground.view import EMOJI, mrkdwn_html
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
JSON = dict[str, Any]


def _settings(tmp_path: Path) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )


def _conversation(state: JSON, channel: str) -> JSON:
    return next(c for c in state["conversations"] if c["id"] == channel)


def _failed(pg: Playground, method: str) -> list[str]:
    return [
        str(c.response.get("error"))
        for c in pg.slack.calls_to(method)
        if c.response is not None and not c.response.get("ok")
    ]


async def test_a_dm_turn_keeps_its_eyes_and_never_reacts_twice(tmp_path: Path) -> None:
    """In a DM (no thread, so progress shows a 👀 reaction, not a status), the demo's own 👀 is
    not refused as already_reacted, and it stays on the message after the turn: the progress
    reaction steps aside when the run reacts itself."""
    async with Playground(_settings(tmp_path), model=demo_model()) as pg:
        await pg.post("U0BOB", "D0BOB", "hello in a DM")
        assert pg.service is not None
        await pg.service.runner.idle()
        roots = _conversation(pg.snapshot(), "D0BOB")["messages"]
    assert _failed(pg, "reactions.add") == [] and _failed(pg, "reactions.remove") == []
    [person] = [m for m in roots if not m["bot"]]
    assert [r["name"] for r in person["reactions"]] == ["eyes"]
    [reply] = [m for m in [*roots, *person["replies"]] if m["bot"]]
    assert "reacted 👀 to your message" in reply["html"]


async def test_line_breaks_from_the_browser_are_stored_as_slack_stores_them(tmp_path: Path) -> None:
    """A browser form sends \\r\\n; the workspace stores \\n, and the demo's quote of what the agent
    was sent is a preformatted block without \\r."""
    async with Playground(_settings(tmp_path), model=demo_model()) as pg:
        ts, _ = await pg.post("U0ALICE", GENERAL, "@threadbound line one\r\nline *two*")
        assert pg.service is not None
        await pg.service.runner.idle()
        stored = pg.slack.find(GENERAL, ts)
        assert stored is not None and "\r" not in stored["text"]
        [root] = _conversation(pg.snapshot(), GENERAL)["messages"]
        [reply] = [m for m in root["replies"] if m["bot"]]
    assert "<pre>" in reply["html"] and "\\r" not in reply["html"]
    assert "line *two*" in reply["html"]  # shown as sent, not as Markdown


async def test_no_status_lingers_under_an_answered_thread(tmp_path: Path) -> None:
    """ "is thinking…" is gone from the page once the bot posted in the thread (Slack clears a
    thread's status when the app posts there)."""
    async with Playground(_settings(tmp_path), model=demo_model()) as pg:
        await pg.post("U0ALICE", GENERAL, "@threadbound hi")
        assert pg.service is not None
        await pg.service.runner.idle()
        assert pg.slack.statuses, "the run showed a status"
        assert _conversation(pg.snapshot(), GENERAL)["statuses"] == {}


async def test_the_demo_answer_carries_its_steps(tmp_path: Path) -> None:
    """The demo's streamed answer carries its tool steps (react, read), each complete."""
    async with Playground(_settings(tmp_path), model=demo_model()) as pg:
        await pg.post("U0ALICE", GENERAL, "@threadbound hi")
        assert pg.service is not None
        await pg.service.runner.idle()
        [root] = _conversation(pg.snapshot(), GENERAL)["messages"]
        [reply] = [m for m in root["replies"] if m["bot"]]
    assert {s["title"] for s in reply["steps"]} >= {"Reacting", "Reading the thread"}
    assert {s["status"] for s in reply["steps"]} == {"complete"}


def test_every_shortcode_the_app_writes_is_shown_as_emoji() -> None:
    """Each :shortcode: in the app's own strings (cards, notes) has an emoji in the page's table, so
    :grey_question: and friends are never shown raw."""
    roles = {"class", "meth", "func", "mod", "attr", "data", "exc", "ref", "doc", "memory"}
    found: set[str] = set()
    for path in [*ROOT.glob("app/**/*.py"), *ROOT.glob("channel/**/*.py")]:
        text = path.read_text(encoding="utf-8")
        found |= set(re.findall(r'":([a-z][a-z0-9_+-]+):', text))
        # Neutral cards name their icons (``Icon("hourglass")``, or a name chosen for one).
        found |= set(re.findall(r'Icon\("([a-z][a-z0-9_+-]+)"\)', text))
        if path.name.endswith("cards.py"):  # an icon chosen by outcome: ("white_check_mark", "Approved")
            found |= set(re.findall(r'(?:emoji = |\()"([a-z][a-z0-9_+]+)"(?: if|, "[A-Z])', text))
    found -= roles
    assert found, "the scan found the app's shortcodes"
    assert sorted(found - set(EMOJI)) == []
    assert "❔" in mrkdwn_html(":grey_question: *Question*", {})


async def test_the_page_gets_one_example_per_feature(tmp_path: Path) -> None:
    """The snapshot offers the demo's examples, one per feature, the file one with its file."""
    async with Playground(_settings(tmp_path), model=demo_model()) as pg:
        examples = pg.snapshot()["examples"]
    assert [e["shows"] for e in examples] == [shows for shows, _ in EXAMPLES]
    assert {"a step and a reaction", "a question", "an approval", "a follow-up", "a file"} == {
        e["shows"] for e in examples
    }
    [with_file] = [e for e in examples if e["file"]]
    assert with_file["shows"] == "a file" and with_file["file"]["name"] == "notes.txt"
