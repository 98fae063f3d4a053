"""The Slack app manifest, the scope table it is built from, and ``python -m app manifest``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.__main__ import main
from app.ops.manifest import (
    AGENT_MANIFEST_FILE,
    AGENT_SESSION_EVENTS,
    BOT_EVENTS,
    MANIFEST_FILE,
    PLACEHOLDER_URL,
    SCOPELESS_EVENTS,
    SOCKET_MODE_MANIFEST_FILE,
    build_manifest,
)
from channel.slack import features_from_scopes
from channel.slack.scopes import AGENT_SCOPES, BASE_SCOPES, FEATURE_SCOPES, missing_scopes, purpose
from channel.tools import CATALOG
from threadbound_emulator import DEFAULT_SCOPES

ROOT = Path(__file__).resolve().parent.parent
URL = "https://bot.example.com/slack/events"


def test_checked_in_manifest_is_current() -> None:
    """slack-manifest.json is exactly build_manifest's output for the placeholder URL, so it cannot drift."""
    expected = json.dumps(build_manifest(PLACEHOLDER_URL), indent=2) + "\n"
    assert (ROOT / MANIFEST_FILE).read_text(encoding="utf-8") == expected


def test_checked_in_socket_mode_manifest_is_current() -> None:
    """slack-manifest.socket-mode.json is exactly `manifest --socket-mode`'s output, so it cannot drift."""
    expected = json.dumps(build_manifest(None, socket_mode=True), indent=2) + "\n"
    assert (ROOT / SOCKET_MODE_MANIFEST_FILE).read_text(encoding="utf-8") == expected


def test_socket_mode_manifest_turns_socket_mode_on_and_names_no_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`manifest --socket-mode` sets socket_mode_enabled, keeps every event, scope and interactivity,
    and names no request URL anywhere; --url with it, or neither, exits 2."""
    assert main(["manifest", "--socket-mode"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    settings = manifest["settings"]
    assert settings["socket_mode_enabled"] is True
    assert settings["interactivity"] == {"is_enabled": True}
    assert "request_url" not in json.dumps(manifest)
    http = build_manifest(URL)
    events = http["settings"]["event_subscriptions"]["bot_events"]
    assert settings["event_subscriptions"]["bot_events"] == events
    assert manifest["oauth_config"] == http["oauth_config"]
    assert main(["manifest", "--socket-mode", "--url", URL]) == 2
    assert main(["manifest"]) == 2
    assert "--socket-mode" in capsys.readouterr().err


def test_manifest_delivers_every_event_the_router_handles_to_the_url() -> None:
    """Events and clicks go to the given URL over HTTP (no socket mode): mentions, and messages in
    every kind of conversation the bot can be in, so thread replies and DMs reach the router."""
    manifest = build_manifest(URL, name="helper")
    settings = manifest["settings"]
    subscriptions = settings["event_subscriptions"]
    assert subscriptions["request_url"] == URL and settings["socket_mode_enabled"] is False
    # Clicks (approval and feedback buttons) are signed interactions posted to the same URL.
    assert settings["interactivity"] == {"is_enabled": True, "request_url": URL}
    kinds = ("channels", "groups", "im", "mpim")  # public, private, DM, group DM
    assert {"app_mention", *(f"message.{kind}" for kind in kinds)} <= set(subscriptions["bot_events"])
    # People DM the bot in its messages tab; a read-only tab would refuse them.
    home = manifest["features"]["app_home"]
    assert home["messages_tab_enabled"] is True and home["messages_tab_read_only_enabled"] is False
    assert manifest["features"]["bot_user"]["display_name"] == "helper"


def test_every_subscribed_event_and_every_tool_has_its_scopes() -> None:
    """The install asks for the scope each subscribed event needs, routing's scopes, and the scopes
    of every catalog tool, so a fresh install enables every tool; the emulator installs the same."""
    manifest = build_manifest(URL)
    bot = set(manifest["oauth_config"]["scopes"]["bot"])
    for event in manifest["settings"]["event_subscriptions"]["bot_events"]:
        assert event in SCOPELESS_EVENTS or BOT_EVENTS[event] in bot, event
    assert set(BASE_SCOPES) <= bot
    for spec in CATALOG.values():
        if spec.feature is not None and spec.feature != "sessions":  # channel_set_title: agent setting
            assert set(FEATURE_SCOPES[spec.feature]) <= bot, spec.name
    assert missing_scopes(sorted(bot)) == {}
    # Agent sessions come with the agent setting (--agent-view), not with a default install.
    assert features_from_scopes(sorted(bot)).enabled() == set(FEATURE_SCOPES) - {"sessions"}
    assert bot == set(DEFAULT_SCOPES)


def test_the_default_manifest_installs_on_any_plan_and_never_asks_for_assistant_view() -> None:
    """By default no agent or assistant view (paid plans, deprecated) and no assistant:write: the
    progress status needs only chat:write since Slack's 2026-03-05 change."""
    manifest = build_manifest(URL)
    assert "agent_view" not in manifest["features"] and "assistant_view" not in manifest["features"]
    bot = manifest["oauth_config"]["scopes"]["bot"]
    assert "assistant:write" not in bot and "chat:write" in bot
    assert features_from_scopes(["chat:write"]).status


def test_agent_view_adds_features_agent_view_and_never_assistant_view(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`manifest --agent-view` adds features.agent_view with a description; assistant_view never appears."""
    assert main(["manifest", "--url", URL, "--agent-view"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["features"]["agent_view"]["agent_description"]
    assert "assistant_view" not in manifest["features"]
    plain = build_manifest(URL)["oauth_config"]["scopes"]["bot"]
    assert manifest["oauth_config"]["scopes"]["bot"] == sorted({*plain, *AGENT_SCOPES})


def test_features_follow_the_scopes() -> None:
    """The adapter's features follow the scope table: any one history scope turns reading on."""
    assert features_from_scopes([]).enabled() == frozenset()
    assert features_from_scopes(["im:history"]).enabled() == {"read"}
    assert features_from_scopes(["chat:write"]).enabled() == {"edit", "retract", "status", "stream", "ask"}


def test_missing_scopes_name_the_tools_they_disable() -> None:
    """A missing scope maps to the tools it disables, and to none while another scope still enables them."""
    all_but = lambda *gone: [s for s in DEFAULT_SCOPES if s not in gone]  # noqa: E731
    assert missing_scopes(DEFAULT_SCOPES) == {}
    assert missing_scopes(all_but("files:write")) == {"files:write": ["channel_attach"]}
    assert missing_scopes(all_but("groups:history")) == {"groups:history": []}
    history = ("channels:history", "groups:history", "im:history", "mpim:history")
    assert all(tools == ["channel_read"] for tools in missing_scopes(all_but(*history)).values())


@pytest.mark.parametrize(
    "url",
    [
        "http://bot.example.com/slack/events",
        "https://bot.example.com/",
        "https://bot.example.com/slack/events?x=1",
        "ftp://bot.example.com/slack/events",
        "https://user:pw@bot.example.com/slack/events",
        "bot.example.com/slack/events",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    """Only https (or http on localhost) URLs ending in /slack/events are accepted."""
    with pytest.raises(ValueError, match="--url"):
        build_manifest(url)


def test_localhost_http_is_allowed_for_development() -> None:
    """http://localhost is accepted, for local development through a tunnel."""
    assert build_manifest("http://localhost:3000/slack/events")["settings"]["event_subscriptions"]


def test_cli_prints_the_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m app manifest --url URL --name N` prints the manifest as JSON and exits 0."""
    assert main(["manifest", "--url", URL, "--name", "helper"]) == 0
    assert json.loads(capsys.readouterr().out) == build_manifest(URL, name="helper")


def test_cli_bad_url_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad --url prints what is wrong on stderr and exits 2, printing no manifest."""
    assert main(["manifest", "--url", "http://bot.example.com/events"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "/slack/events" in captured.err


def test_checked_in_agent_manifest_is_current_and_declares_sessions() -> None:
    """slack-manifest.agent.json is `manifest --agent-view`'s output: declared an agent, it asks for
    ``assistant:write`` and subscribes to the agent-session events (Stop, rename); the default
    manifest asks for neither (it installs on any plan)."""
    agent = build_manifest(PLACEHOLDER_URL, agent_view=True)
    assert (ROOT / AGENT_MANIFEST_FILE).read_text(encoding="utf-8") == json.dumps(agent, indent=2) + "\n"
    assert "assistant:write" in agent["oauth_config"]["scopes"]["bot"]
    for event in AGENT_SESSION_EVENTS:
        assert event in agent["settings"]["event_subscriptions"]["bot_events"]
    plain = build_manifest(PLACEHOLDER_URL)
    assert "assistant:write" not in plain["oauth_config"]["scopes"]["bot"]
    assert not set(AGENT_SESSION_EVENTS) & set(plain["settings"]["event_subscriptions"]["bot_events"])


def test_the_manifest_declares_the_ways_in(capsys: pytest.CaptureFixture[str]) -> None:
    """The App Home tab is on and app_home_opened delivered; the message shortcut threadbound_ask
    and the slash command (its name from --slash-command, else $SLASH_COMMAND, else /threadbound)
    are declared with the commands scope, the command posting to the events URL over HTTP and
    naming no URL in Socket Mode; a bad command name exits 2."""
    manifest = build_manifest(URL)
    features = manifest["features"]
    assert features["app_home"]["home_tab_enabled"] is True
    assert "app_home_opened" in manifest["settings"]["event_subscriptions"]["bot_events"]
    assert "commands" in manifest["oauth_config"]["scopes"]["bot"]
    [shortcut] = features["shortcuts"]
    assert shortcut["type"] == "message" and shortcut["callback_id"] == "threadbound_ask"
    assert shortcut["name"] == "Ask threadbound"
    [command] = features["slash_commands"]
    assert command["command"] == "/threadbound" and command["url"] == URL
    [socket_command] = build_manifest(None, socket_mode=True)["features"]["slash_commands"]
    assert "url" not in socket_command
    assert main(["manifest", "--url", URL, "--slash-command", "/helper"]) == 0
    assert json.loads(capsys.readouterr().out)["features"]["slash_commands"][0]["command"] == "/helper"
    assert main(["manifest", "--url", URL, "--slash-command", "helper"]) == 2
    events = build_manifest(URL, agent_view=True)["settings"]["event_subscriptions"]["bot_events"]
    assert len(events) == len(set(events))
    # `check` warns when the install lacks it, naming what it is for.
    without = [s for s in DEFAULT_SCOPES if s != "commands"]
    assert missing_scopes(without) == {"commands": []} and "slash command" in purpose("commands")
