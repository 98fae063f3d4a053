"""The neutral inbound message: Slack's events become it at the edge, the inbox stores it, rows of
the previous format (Slack's event fields) are still answered, and the runs read no Slack keys."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from channel import inbound
from channel.inbound import InboundAuthor, InboundFile, InboundMessage
from channel.slack.inbound import inbound_message
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, scripted
from tests.support.prompts import rows
from threadbound_emulator import FakeSlack

ROOT = Path(__file__).resolve().parent.parent


def _event(envelope: dict[str, Any]) -> dict[str, Any]:
    event: dict[str, Any] = envelope["event"]
    return event


def test_a_thread_reply_with_files_becomes_the_neutral_message() -> None:
    """Author, organisation, text, files and refs come from the event; the thread is the one it is in."""
    files = [{"id": "F1", "name": "report.csv"}, {"id": "F2", "title": "notes"}]
    event = _event(events.message("C1", "U1", "see attached", "2.000002", thread_ts="1.000001", files=files))
    message = inbound_message(event)
    assert message.author == InboundAuthor(id="U1", organisation=events.TEAM_ID)
    assert message.text == "see attached"
    assert message.files == (InboundFile(id="F1", name="report.csv"), InboundFile(id="F2", name="notes"))
    assert (message.ref, message.conversation, message.id, message.thread) == (
        "C1:2.000002",
        "C1",
        "2.000002",
        "1.000001",
    )
    assert not (message.direct or message.edited or message.forwarded)
    assert message.data["files"] == files and "event_ts" not in message.data


def test_a_direct_message_is_marked_direct() -> None:
    """A message in a DM with the bot says so, at the top level (no thread)."""
    message = inbound_message(_event(events.message("D1", "U1", "hi", "3.000003", channel_type="im")))
    assert message.direct and message.thread == ""


def test_an_edit_is_the_message_as_it_reads_now_marked_edited() -> None:
    """A ``message_changed`` edit becomes the edited message, in the event's channel, marked edited."""
    event = _event(events.message_changed("C1", "U1", "<@UBOT> now with a mention", "4.000004", "before"))
    message = inbound_message(event)
    assert message.edited and message.text == "<@UBOT> now with a mention"
    assert (message.conversation, message.id, message.author.id) == ("C1", "4.000004", "U1")


def test_an_app_mention_carrying_edited_is_marked_edited() -> None:
    """Slack's ``app_mention`` for an edit carries ``edited``: the message says it was edited."""
    event = _event(events.app_mention("C1", "U1", "<@UBOT> hi", "5.000005"))
    assert not inbound_message(event).edited
    assert inbound_message(event | {"edited": {"user": "U1", "ts": "6.0"}}).edited


def test_a_forwarded_message_is_marked_forwarded_and_keeps_what_the_adapter_renders() -> None:
    """A shared message (an ``is_share`` attachment) is forwarded; the attachment stays in ``data``."""
    shared = {"is_share": True, "text": "the original", "author_id": "U2"}
    event = _event(events.message("C1", "U1", "look", "7.000007")) | {"attachments": [shared]}
    message = inbound_message(event)
    assert message.forwarded and message.data["attachments"] == [shared]
    assert message.author.id == "U1"  # the forwarder, never the original's author


def test_a_bots_message_names_the_bot() -> None:
    """A bot's post has a bot id and no person."""
    message = inbound_message(_event(events.message("C1", "", "beep", "8.0", bot_id="B1")))
    assert message.author == InboundAuthor(bot="B1", organisation=events.TEAM_ID)


def test_a_stored_message_reads_back_the_same() -> None:
    """The inbox row holds the neutral message, versioned; reading it back gives the same message."""
    event = _event(
        events.message("C1", "U1", "hi", "2.0", thread_ts="1.0", files=[{"id": "F1", "name": "a"}])
    )
    message = inbound_message(event)
    row = json.loads(inbound.dump(message))
    assert row["kind"] == inbound.KIND and row["version"] == inbound.VERSION
    assert inbound.stored(inbound.dump(message)) == message


def test_a_row_of_the_previous_format_reads_as_the_builder_would_have_built_it() -> None:
    """A row stored before (Slack's event fields, unmarked) gives the neutral facts the Slack builder
    gives for the same fields; its ref is left to the adapter, and the whole row stays its ``data``."""
    old = {
        "channel": "C1",
        "ts": "2.0",
        "thread_ts": "1.0",
        "user": "U1",
        "text": "hi",
        "files": [{"id": "F1"}],
    }
    read = inbound.stored(json.dumps(old))
    assert read is not None and read.data == old and read.ref == ""
    built = inbound_message(old)
    for name in ("author", "text", "files", "conversation", "id", "thread", "direct"):
        assert getattr(read, name) == getattr(built, name), name


def test_rows_of_other_kinds_are_no_message() -> None:
    """Decisions, answers and follow-ups are not messages; a follow-up still names its requester."""
    assert inbound.stored(json.dumps({"kind": "approval_decision", "approval_id": "a"})) is None
    assert inbound.stored("not json") is None and inbound.stored("[1]") is None
    follow_up = json.dumps({"kind": "follow_up", "user": "U7"})
    assert inbound.stored(follow_up) is None and inbound.person(follow_up) == "U7"
    assert inbound.person(inbound.dump(InboundMessage(author=InboundAuthor(id="U3")))) == "U3"


async def test_an_inbox_row_of_the_previous_format_is_still_answered(tmp_path: Path) -> None:
    """A message claimed by the previous version (its row holds Slack's event fields) and left in the
    inbox across an upgrade is shown to the model with its author and text, and answered."""
    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
        return ["Here you go."]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        ts = slack.add_message("C1", "<@UBOT> what's new?", user="U1")
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            assert app.service is not None
            old = {
                "channel": "C1",
                "ts": ts,
                "user": "U1",
                "text": "<@UBOT> what's new?",
                "channel_type": "channel",
            }
            outcome = await app.service.store.claim_message(
                event_id="Ev0OLDROW", channel="C1", ts=ts, thread_ts=ts, create=True,
                payload=json.dumps(old), now=0.0,
            )  # fmt: skip
            assert outcome.task_id is not None
            app.service.runner.notify(outcome.task_id)
            await app.idle()
        [row] = rows(prompts[0])
        assert row["author"] == "Alice" and row["text"] == "@threadbound what's new?"
        assert [m["text"] for m in slack.thread("C1", ts)][-1] == "Here you go."


#: Slack's event keys the runs and the agent no longer read (the neutral message has them). ``text``
#: and ``files`` are left out: tool results and the prompt's rows use those words too.
SLACK_KEYS = frozenset(
    {"user", "ts", "channel", "thread_ts", "user_team", "team", "bot_id", "bot_profile", "subtype"}
    | {"channel_type", "blocks", "attachments"}
)


def _slack_key_reads(path: Path) -> list[str]:
    """``x["key"]`` and ``x.get("key")`` of a Slack event key in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        key: ast.expr | None = None
        if isinstance(node, ast.Subscript):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            key = node.args[0] if node.args else None
        if isinstance(key, ast.Constant) and key.value in SLACK_KEYS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} reads {key.value!r}")
    return found


def test_the_runs_and_the_agent_read_no_slack_event_keys() -> None:
    """No module of ``app/runs`` or ``app/agent`` reads a Slack event key: they read the neutral message."""
    modules = sorted((ROOT / "app" / "runs").rglob("*.py")) + sorted((ROOT / "app" / "agent").rglob("*.py"))
    assert modules
    assert [hit for path in modules for hit in _slack_key_reads(path)] == []
