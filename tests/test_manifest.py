"""The Slack app manifest, the scope table it is built from, and ``python -m app manifest``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.__main__ import main
from app.manifest import BOT_EVENTS, PLACEHOLDER_URL, build_manifest
from channel.slack import features_from_scopes
from channel.slack.scopes import BASE_SCOPES, FEATURE_SCOPES, missing_scopes, wanted_scopes
from channel.tools import CATALOG
from emulator import DEFAULT_SCOPES

ROOT = Path(__file__).resolve().parent.parent
URL = "https://bot.example.com/slack/events"


def test_checked_in_manifest_is_current() -> None:
    """slack-manifest.json is exactly build_manifest's output for the placeholder URL, so it cannot drift."""
    expected = json.dumps(build_manifest(PLACEHOLDER_URL), indent=2) + "\n"
    assert (ROOT / "slack-manifest.json").read_text(encoding="utf-8") == expected


def test_manifest_is_an_events_api_install() -> None:
    """The manifest subscribes to the five message events at the URL (clicks too), with no socket mode."""
    manifest = build_manifest(URL, name="helper")
    settings = manifest["settings"]
    assert settings["event_subscriptions"] == {
        "request_url": URL,
        "bot_events": ["app_mention", "message.channels", "message.groups", "message.im", "message.mpim"],
    }
    assert settings["socket_mode_enabled"] is False
    assert settings["org_deploy_enabled"] is False
    assert settings["token_rotation_enabled"] is False
    assert settings["interactivity"] == {"is_enabled": True, "request_url": URL}
    assert manifest["display_information"]["name"] == "helper"
    assert manifest["features"]["bot_user"] == {"display_name": "helper", "always_online": True}
    home = manifest["features"]["app_home"]
    assert home["messages_tab_enabled"] is True and home["messages_tab_read_only_enabled"] is False


def test_scopes_cover_events_tools_and_routing() -> None:
    """Requested scopes are routing + every catalog tool's + progress, covering every subscribed event."""
    bot = build_manifest(URL)["oauth_config"]["scopes"]["bot"]
    assert bot == wanted_scopes()
    assert set(BOT_EVENTS.values()) <= set(bot)
    assert set(BASE_SCOPES) <= set(bot)
    for spec in CATALOG.values():
        if spec.feature is not None:
            assert set(FEATURE_SCOPES[spec.feature]) <= set(bot), spec.name
    # The fake's default install is the full one.
    assert set(bot) == set(DEFAULT_SCOPES)


def test_assistant_view_accompanies_assistant_write() -> None:
    """assistant:write is only granted with the assistant view on, so the two come together."""
    manifest = build_manifest(URL)
    assert "assistant:write" in manifest["oauth_config"]["scopes"]["bot"]
    assert manifest["features"]["assistant_view"]["assistant_description"]


def test_features_from_scopes_unchanged() -> None:
    """The adapter's features still follow the scope table: any one history scope turns reading on."""
    assert features_from_scopes([]).enabled() == frozenset()
    assert features_from_scopes(["im:history"]).enabled() == {"read"}
    assert features_from_scopes(DEFAULT_SCOPES).enabled() == set(FEATURE_SCOPES)
    assert features_from_scopes(["chat:write"]).enabled() == {"edit", "retract", "stream"}


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
