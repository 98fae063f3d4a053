"""Access control end to end: ALLOWED_CHANNELS, ALLOWED_USERS, ALLOW_BOTS, ALLOW_DMS and loop protection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app import logs
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_channel("C2", "random")
    slack.add_user("U1", "alice", display_name="Alice")
    slack.add_user("U2", "bob", display_name="Bob")
    slack.add_user("UOTHER", "otherbot", display_name="Other Bot", is_bot=True)


class _Model:
    """A scripted model that answers every prompt once and remembers the prompts it saw."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def script(self, turn: Turn) -> list[Any]:
        if turn.prompt:
            self.prompts.append(turn.prompt)
            return [call("channel_reply", text=f"answer {len(self.prompts)}")]
        return [""]

    def model(self) -> Any:
        return scripted(self.script)


def _bot_mention(channel: str, text: str, ts: str, thread_ts: str | None = None) -> dict[str, Any]:
    """An app_mention posted by another bot, carrying its bot_id as Slack sends it."""
    envelope = events.app_mention(channel, "UOTHER", text, ts, thread_ts=thread_ts)
    envelope["event"]["bot_id"] = "BOTHER"
    return envelope


def _ignored(captured: logs.Captured) -> list[dict[str, Any]]:
    return [line for line in captured.lines("delivery") if line["outcome"] == "ignored"]


async def test_allowed_channels_limit_where_the_bot_answers(tmp_path: Path) -> None:
    """A mention outside ALLOWED_CHANNELS starts nothing and is logged once with its reason, retries too."""
    brain = _Model()
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=brain.model(), data_dir=tmp_path, allowed_channels="C1") as app:
            with logs.capture(app.settings) as captured:
                outside = slack.add_message("C2", "<@UBOT> help", user="U1")
                envelope = events.app_mention("C2", "U1", "<@UBOT> help", outside)
                assert (await app.deliver(envelope)).status == 200
                assert (await app.deliver(envelope, retry_num=1)).status == 200
                inside = slack.add_message("C1", "<@UBOT> help", user="U1")
                await app.deliver(events.app_mention("C1", "U1", "<@UBOT> help", inside))
                await app.idle()
        assert len(brain.prompts) == 1
        assert slack.bot_messages("C2") == [] and len(slack.bot_messages("C1")) == 1
        ignored = _ignored(captured)
        assert len(ignored) == 1
        assert ignored[0]["channel"] == "C2" and ignored[0]["event_id"] == envelope["event_id"]
        assert ignored[0]["reason"] == "channel is not in ALLOWED_CHANNELS"


async def test_allowed_users_limit_who_starts_or_continues_a_task(tmp_path: Path) -> None:
    """Only ALLOWED_USERS start tasks; another person's reply in a task's thread never reaches the model."""
    brain = _Model()
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=brain.model(), data_dir=tmp_path, allowed_users="U1") as app:
            with logs.capture(app.settings) as captured:
                bob = slack.add_message("C1", "<@UBOT> from bob", user="U2")
                await app.deliver(events.app_mention("C1", "U2", "<@UBOT> from bob", bob))
                root = slack.add_message("C1", "<@UBOT> from alice", user="U1")
                await app.deliver(events.app_mention("C1", "U1", "<@UBOT> from alice", root))
                await app.idle()
                reply = slack.add_message("C1", "bob chiming in", user="U2", thread_ts=root)
                await app.deliver(events.message("C1", "U2", "bob chiming in", reply, thread_ts=root))
                await app.idle()
        assert len(brain.prompts) == 1 and "from alice" in brain.prompts[0]
        assert len(slack.bot_messages("C1")) == 1
        reasons = {line["reason"] for line in _ignored(captured) if line.get("user") == "U2"}
        assert reasons == {"author is not in ALLOWED_USERS"}


async def test_direct_messages_can_be_turned_off(tmp_path: Path) -> None:
    """With ALLOW_DMS=false a direct message starts nothing and gets no reply."""
    brain = _Model()
    async with FakeSlack() as slack:
        _workspace(slack)
        slack.add_channel("D1", "alice-dm", is_im=True, user="U1")
        async with AppHarness(slack, model=brain.model(), data_dir=tmp_path, allow_dms=False) as app:
            with logs.capture(app.settings) as captured:
                ts = slack.add_message("D1", "hello bot", user="U1")
                await app.deliver(events.message("D1", "U1", "hello bot", ts, channel_type="im"))
                await app.idle()
        assert brain.prompts == [] and slack.bot_messages() == []
        assert [line["reason"] for line in _ignored(captured)] == ["direct messages are off (ALLOW_DMS)"]


async def test_direct_messages_are_answered_by_default(tmp_path: Path) -> None:
    """ALLOW_DMS defaults to on: a direct message needs no mention to be answered."""
    brain = _Model()
    async with FakeSlack() as slack:
        _workspace(slack)
        slack.add_channel("D1", "alice-dm", is_im=True, user="U1")
        async with AppHarness(slack, model=brain.model(), data_dir=tmp_path) as app:
            ts = slack.add_message("D1", "hello bot", user="U1")
            await app.deliver(events.message("D1", "U1", "hello bot", ts, channel_type="im"))
            await app.idle()
        assert len(brain.prompts) == 1 and len(slack.bot_messages("D1")) == 1


async def test_other_bots_are_ignored_unless_allowed(tmp_path: Path) -> None:
    """Another bot's mention is ignored by default and answered with ALLOW_BOTS on (integration posts too)."""
    async with FakeSlack() as slack:
        _workspace(slack)
        brain = _Model()
        async with AppHarness(slack, model=brain.model(), data_dir=tmp_path / "off") as app:
            with logs.capture(app.settings) as captured:
                ts = slack.add_message("C1", "<@UBOT> status?", user="UOTHER")
                await app.deliver(_bot_mention("C1", "<@UBOT> status?", ts))
                await app.deliver(events.message("C1", "UOTHER", "<@UBOT> status?", ts, bot_id="BOTHER"))
                await app.idle()
        assert brain.prompts == []
        assert "posted by another bot (ALLOW_BOTS is off)" in {line["reason"] for line in _ignored(captured)}

        allowed = _Model()
        async with AppHarness(slack, model=allowed.model(), data_dir=tmp_path / "on", allow_bots=True) as app:
            ts = slack.add_message("C1", "<@UBOT> nightly report", user="UOTHER")
            await app.deliver(events.message("C1", "UOTHER", "<@UBOT> nightly report", ts, bot_id="BOTHER"))
            hook = slack.add_message("C1", "<@UBOT> from a webhook", user="UOTHER")
            await app.deliver(
                events.message(
                    "C1", "", "<@UBOT> from a webhook", hook, bot_id="BHOOK", subtype="bot_message"
                )
            )
            await app.idle()
        assert len(allowed.prompts) == 2  # two tasks, run concurrently: in either order
        assert any("nightly report" in p for p in allowed.prompts)
        assert any("from a webhook" in p for p in allowed.prompts)


async def test_loop_protection_holds_with_bots_allowed(tmp_path: Path) -> None:
    """With ALLOW_BOTS on the bot still never answers itself, nor a bot replying to it in its thread."""
    brain = _Model()
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=brain.model(), data_dir=tmp_path, allow_bots=True) as app:
            with logs.capture(app.settings) as captured:
                root = slack.add_message("C1", "<@UBOT> please summarise", user="UOTHER")
                await app.deliver(
                    events.message("C1", "UOTHER", "<@UBOT> please summarise", root, bot_id="BOTHER")
                )
                await app.idle()
                ours = slack.bot_messages("C1")
                assert len(ours) == 1
                # Slack echoes our own reply back as a message event in the thread.
                await app.deliver(
                    events.message(
                        "C1", "UBOT", ours[0]["text"], ours[0]["ts"], thread_ts=root, bot_id="BBOT"
                    )
                )
                # The other bot answers us in the thread, without and with a mention.
                for text in ("thanks", "<@UBOT> thanks again"):
                    ts = slack.add_message("C1", text, user="UOTHER", thread_ts=root)
                    await app.deliver(
                        events.message("C1", "UOTHER", text, ts, thread_ts=root, bot_id="BOTHER")
                    )
                    await app.deliver(_bot_mention("C1", text, ts, thread_ts=root))
                # Our own top-level post that mentions us (e.g. quoting) starts nothing either.
                own = slack.add_message("C1", "<@UBOT> talking to myself", user="UBOT")
                await app.deliver(
                    events.message("C1", "UBOT", "<@UBOT> talking to myself", own, bot_id="BBOT")
                )
                await app.idle()
        assert len(brain.prompts) == 1
        assert [m["text"] for m in slack.bot_messages("C1")] == ["answer 1", "<@UBOT> talking to myself"]
        reasons = {line["reason"] for line in _ignored(captured)}
        assert {
            "the bot's own post",
            "a bot reply in a thread (loop protection)",
            "a bot mentioning the bot inside a thread (loop protection)",
        } <= reasons


def _external_mention(slack: FakeSlack, channel: str, user: str, text: str) -> dict[str, Any]:
    """A mention from a Slack Connect guest: their message carries their own organisation's team."""
    ts = slack.add_message(channel, text, user=user)
    envelope = events.app_mention(channel, user, text, ts)
    envelope["event"]["team"] = envelope["event"]["user_team"] = "TPARTNER"
    return envelope


async def test_people_from_another_organisation_are_ignored_and_told_once(tmp_path: Path) -> None:
    """By default a Slack Connect guest's mentions start nothing: the delivery log says why, and they get
    one private note however often they try; the install's own people are answered as before."""
    brain = _Model()
    async with FakeSlack() as slack:
        _workspace(slack)
        slack.add_user("UGUEST", "guest", display_name="Guest")
        async with AppHarness(slack, model=brain.model(), data_dir=tmp_path) as app:
            with logs.capture(app.settings) as captured:
                for text in ("<@UBOT> run the tools", "<@UBOT> please?"):
                    assert (await app.deliver(_external_mention(slack, "C1", "UGUEST", text))).status == 200
                await app.idle()
                assert app.service is not None
                await app.service.ingress.on_external.idle()  # type: ignore[union-attr]
                ours = slack.add_message("C1", "<@UBOT> hello", user="U1")
                await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hello", ours))
                await app.idle()
        assert len(brain.prompts) == 1 and "hello" in brain.prompts[0]
        notes = [e for e in slack.ephemerals if e[1] == "UGUEST"]
        assert len(notes) == 1 and notes[0][0] == "C1" and "own organisation" in notes[0][3]
        reasons = {line["reason"] for line in _ignored(captured) if line.get("user") == "UGUEST"}
        assert reasons == {"author is from another organisation (ALLOW_EXTERNAL_USERS is off)"}


async def test_allow_external_users_serves_people_from_another_organisation(tmp_path: Path) -> None:
    """With ALLOW_EXTERNAL_USERS=true a Slack Connect guest's mention is answered like anyone's."""
    brain = _Model()
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(
            slack, model=brain.model(), data_dir=tmp_path, allow_external_users=True
        ) as app:
            await app.deliver(_external_mention(slack, "C1", "UGUEST", "<@UBOT> hi"))
            await app.idle()
        assert len(brain.prompts) == 1 and slack.ephemerals == []
