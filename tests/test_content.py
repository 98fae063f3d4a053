"""Tests for channel.slack.content and .blocks: a Slack message as the model reads it."""

from __future__ import annotations

import random
import re
from typing import Any

from app.intake.router import classify
from app.settings import Settings
from channel.slack.content import file_stubs, message_files, references, render_message, with_files
from channel.slack.file_meta import file_meta
from channel.slack.identity import SlackIdentity
from channel.slack.render import Names
from tests.support import fixtures

NAMES = Names(
    users={"U05JAA9EN4T": "Lev", "U043H11ES4V": "Jade", "UBOT": "threadbound", "USLACKBOT": "Slackbot"},
    channels={"C07KTH1T4CQ": "dev-null", "C123ABC456": "release"},
)
# Slack IDs as they appear outside URLs (a URL a person pasted is content, not an address we add).
_ID = re.compile(r"(?<![/\w])[UWCGDSBTFR][A-Z0-9]{8,}\b")


def _event(name: str) -> dict[str, Any]:
    event = fixtures.load(name)["event"]
    assert isinstance(event, dict)
    return event


def _no_ids(text: str) -> None:
    assert not _ID.findall(re.sub(r"https?://\S+", "", text)), text


def test_a_forwarded_message_shows_author_place_time_and_text() -> None:
    """The forwarded message's author, channel, time and text reach the model, quoted."""
    text = render_message(_event("forwarded_message"), NAMES)
    assert text == "> Forwarded message from lev in #dev-null, 2024-08-29T17:24:41Z:\n> 123"
    _no_ids(text)


def test_a_share_with_a_comment_shows_both() -> None:
    """A share's comment comes first, then the shared message."""
    text = render_message(_event("share_with_message"), NAMES)
    assert text.startswith("@threadbound hello check that out!\n\n> Forwarded message from lev in #dev-null")
    assert text.endswith("> this will be shared with a message")


def test_a_forwarded_slackbot_notice_names_slackbot() -> None:
    """Who wrote the original is shown even when it was Slackbot."""
    text = render_message(_event("slackbot_forwarded_by_person"), NAMES)
    assert "what does this mean?" in text
    assert "> Forwarded message from Slackbot" in text
    assert "> You have been removed from #testing-slack-app by @Jade" in text


def test_a_share_without_an_author_name_names_the_author_by_lookup() -> None:
    """The share's own author_name is what Slack draws; without it the author's ID is looked up."""
    att = {"is_share": True, "author_id": "U05JAA9EN4T", "text": "hi"}
    assert "U05JAA9EN4T" in references({"attachments": [att]}).users
    assert render_message({"attachments": [att]}, NAMES) == "> Forwarded message from Lev:\n> hi"


def test_share_falls_back_to_attachment_text_then_fallback() -> None:
    """Without message_blocks the attachment text is shown, without text its fallback."""
    att = {"is_share": True, "author_name": "Kim", "text": "see <#C123ABC456>", "fallback": "[fb] Kim: x"}
    assert render_message({"attachments": [att]}, NAMES) == "> Forwarded message from Kim:\n> see #release"
    att = {"is_share": True, "author_name": "Kim", "fallback": "[fb] Kim: x"}
    assert render_message({"attachments": [att]}, NAMES) == "> Forwarded message from Kim:\n> [fb] Kim: x"


def test_nested_shares_stop_at_a_bounded_depth() -> None:
    """A forward of a forward of … renders a few levels, then says it stopped."""
    message: dict[str, Any] = {"text": "level 0"}
    for level in range(6, 0, -1):
        message = {
            "text": "",
            "attachments": [
                {"is_share": True, "author_name": f"p{level}", "message_blocks": [{"message": {**message}}]}
            ],
        }
        message["attachments"][0]["message_blocks"][0]["message"]["text"] = f"level {level}"
    text = render_message(message, NAMES)
    assert "level 1" in text and "level 3" in text
    assert "nested too deep to show" in text and "level 5" not in text


def test_files_of_forwarded_messages_join_the_message_files() -> None:
    """A forwarded message's files are listed with the message's own, once each, and named in the quote."""
    own = {"id": "F1", "name": "a.txt"}
    shared = {"id": "F2", "name": "b.pdf"}
    message = {
        "files": [own],
        "attachments": [{"is_share": True, "author_name": "Kim", "text": "x", "files": [shared, own]}],
    }
    assert [f["id"] for f in message_files(message)] == ["F1", "F2"]
    assert "(attached: b.pdf, a.txt)" in render_message(message, NAMES)


def test_rich_text_blocks_render_mentions_channels_and_links() -> None:
    """Rich-text elements become names and links; the channel's name comes from the text's label."""
    event = _event("rich_text")
    refs = references(event)
    assert refs.channel_labels == {"C043YJGBY49": "general"} and "C043YJGBY49" not in refs.channels
    names = Names(users={"U043H11ES4V": "Jade"}, channels=refs.channel_labels)
    assert render_message(event, names) == "#general :cat: @Jade https://google.com text text text"


def test_rich_text_containers_keep_lists_quotes_and_code() -> None:
    """Lists, quotes and code blocks keep their structure; message mentions name the channel."""
    text = render_message(_event("rich_text_containers_dm"), NAMES)
    assert text == (
        "- (a message in #release)\n"
        "- https://example.com/list-item\n"
        "> (a message in #release)\n"
        "```\nSee the documentation:\nhttps://example.com/code-reference\n```"
    )


def test_rich_text_styles_links_groups_dates_and_broadcasts() -> None:
    """Styles become Markdown; labelled links, user groups, dates and @here read as a person sees them."""
    blocks = [
        {
            "type": "rich_text",
            "elements": [
                {
                    "type": "rich_text_section",
                    "elements": [
                        {"type": "text", "text": "ship ", "style": {"bold": True}},
                        {"type": "text", "text": "it", "style": {"italic": True, "strike": True}},
                        {"type": "text", "text": " with "},
                        {"type": "text", "text": "make", "style": {"code": True}},
                        {"type": "text", "text": " see "},
                        {"type": "link", "url": "https://x.io/a", "text": "the plan"},
                        {"type": "text", "text": " cc "},
                        {"type": "usergroup", "usergroup_id": "S0123ABCDE"},
                        {"type": "text", "text": " "},
                        {"type": "broadcast", "range": "here"},
                        {"type": "text", "text": " by "},
                        {
                            "type": "date",
                            "timestamp": 1720710212,
                            "format": "{date}",
                            "fallback": "July 11th",
                        },
                        {"type": "text", "text": " or "},
                        {"type": "date", "timestamp": 1720710212, "format": "{date}"},
                    ],
                },
                {
                    "type": "rich_text_list",
                    "style": "ordered",
                    "indent": 1,
                    "elements": [
                        {"type": "rich_text_section", "elements": [{"type": "text", "text": "first"}]},
                        {"type": "rich_text_section", "elements": [{"type": "text", "text": "second"}]},
                    ],
                },
            ],
        }
    ]
    names = Names(groups={"S0123ABCDE": "oncall"})
    assert render_message({"text": "fallback", "blocks": blocks}, names) == (
        "**ship** ~~_it_~~ with `make` see [the plan](https://x.io/a) cc @oncall @here by July 11th or "
        "2024-07-11 15:03 UTC\n  1. first\n  2. second"
    )


def test_unknown_references_never_show_ids() -> None:
    """Users, channels and groups nobody could name render as placeholders, not IDs."""
    blocks = [
        {
            "type": "rich_text",
            "elements": [
                {
                    "type": "rich_text_section",
                    "elements": [
                        {"type": "user", "user_id": "U0NOBODY01"},
                        {"type": "text", "text": " "},
                        {"type": "channel", "channel_id": "C0NOWHERE1"},
                        {"type": "text", "text": " "},
                        {"type": "usergroup", "usergroup_id": "S0NOGROUP1"},
                        {"type": "text", "text": " "},
                        {"type": "team", "team_id": "T0NOTEAM01"},
                    ],
                }
            ],
        }
    ]
    text = render_message({"blocks": blocks}, Names())
    assert text == "@someone #a-channel @a-group "
    _no_ids(text)


def test_app_blocks_say_more_than_their_fallback() -> None:
    """Header, section (with fields) and context blocks are shown instead of the fallback text."""
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "Deploy failed"}},
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": "*api* on <#C123ABC456|prod>"},
            "fields": [{"type": "mrkdwn", "text": "*Owner* <@U043H11ES4V>"}],
            "accessory": {"type": "button", "text": {"type": "plain_text", "text": "Retry"}},
        },
        {"type": "actions", "elements": [{"type": "button", "text": {"type": "plain_text", "text": "Ack"}}]},
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": "build 42"}, {"type": "image", "alt_text": "x"}],
        },
    ]
    assert render_message({"text": "Deploy failed", "blocks": blocks}, NAMES) == (
        "**Deploy failed**\n*api* on #prod\n*Owner* @Jade\nbuild 42"
    )


def test_link_previews_are_brief() -> None:
    """A link preview shows service, title and link, and a short excerpt of its text."""
    row = fixtures.load("unfurl_article_row")
    text = render_message(row, NAMES)
    assert "> Link preview (computerwoche.de): [Blockchain revolutioniert Mobilität?" in text
    assert "(https://www.computerwoche.de/a/verabschieden-sie-sich-von-ihrem-auto,3330570)" in text
    assert "> Sie lieben Ihr Auto?" in text
    long = {
        "attachments": [
            {"service_name": "S", "title": "T", "title_link": "https://x.io", "text": "word " * 200}
        ]
    }
    excerpt = render_message(long, NAMES).split("\n")[1]
    assert len(excerpt) <= 2 + 280 and excerpt.endswith("…")


def test_integration_attachments_show_pretext_title_text_and_fields() -> None:
    """An app's legacy attachment shows what Slack draws: pretext, title, text, fields."""
    text = render_message(_event("github_bot_message"), NAMES)
    assert text.startswith("> Pull request opened by [ldub](https://github.com/ldub)\n> **[#8 https://")
    assert "> this is a fake pr with a link" in text
    fields = {"attachments": [{"title": "Alert", "fields": [{"title": "Host", "value": "web-1"}]}]}
    assert render_message(fields, NAMES) == "> **Alert**\n> Host: web-1"


def test_attachments_of_unknown_shape_render_nothing_and_do_not_fail() -> None:
    """An attachment that follows no published shape is skipped without an error."""
    assert render_message(_event("non_spec_attachment"), NAMES) == ""


def test_references_cover_authors_blocks_and_attachments() -> None:
    """Every ID a message shows is listed for lookup, and labels found in text are kept."""
    refs = references(_event("share_with_message"))
    assert {"U05JAA9EN4T", "UBOT"} <= refs.users
    assert "C07KTH1T4CQ" in refs.channels
    refs = references(_event("message_changed_unfurl")["message"])
    assert refs.channel_labels == {"C043YJGBY49": "general"} and not refs.channels


def test_every_fixture_renders_without_ids_or_errors() -> None:
    """No fixture message raises, and none shows a raw Slack ID outside pasted URLs."""
    for name in fixtures.names():
        payload = fixtures.load(name)
        event = payload.get("event", payload)
        message = event.get("message", event) if isinstance(event, dict) else {}
        if not isinstance(message, dict):
            continue
        refs = references(message)
        names = Names(
            users={u: "Someone" for u in refs.users},
            channels={**{c: "somewhere" for c in refs.channels}, **refs.channel_labels},
        )
        _no_ids(render_message(message, names))


_KEYS = (
    "type subtype text blocks attachments elements fields message_blocks message files is_share "
    "is_msg_unfurl author_id author_name channel_id channel_name ts thread_ts fallback title title_link "
    "service_name from_url pretext value style indent offset user_id usergroup_id range name timestamp url "
    "id file_access mode size user channel channel_type bot_id hidden edited"
).split()
_TYPES = (
    "rich_text rich_text_section rich_text_list rich_text_quote rich_text_preformatted text link user "
    "usergroup channel emoji broadcast date section header context markdown image mrkdwn plain_text "
    "message_mention message app_mention message_changed file_share"
).split()
_LEAVES: list[Any] = [
    None,
    "",
    "x",
    "<@U1>",
    "<@UBOT>",
    "<#C1>",
    0,
    1.5,
    -3,
    True,
    "1720710212",
    "check_file_info",
    [],
    {},
]


def _junk(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth > 4 or roll < 0.3:
        return rng.choice([*_LEAVES, rng.choice(_TYPES)])
    if roll < 0.55:
        return [_junk(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = rng.sample(_KEYS, rng.randint(0, 8))
    return {
        k: rng.choice(_TYPES) if k in ("type", "subtype") and rng.random() < 0.8 else _junk(rng, depth + 1)
        for k in keys
    }


def test_malformed_payloads_never_raise() -> None:
    """Payloads of any shape (wrong types, missing keys, deep nesting) route and render without error."""
    rng = random.Random(11)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    for _ in range(3000):
        message = _junk(rng, 0)
        if not isinstance(message, dict):
            message = {"attachments": message, "blocks": message, "files": message}
        classify(message, SlackIdentity("UBOT", "BBOT", "", "", ()), settings)
        render_message(message, Names(users={u: "x" for u in references(message).users}))
        file_stubs(message)
        with_files(message, {"x": {"id": "x"}})
        for file in message_files(message):
            file_meta(file)
