"""Tests for channel.slack.render: Slack mrkdwn → model text with no raw Slack IDs."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest

from channel.slack.render import display_name, render_text, user_ids_in

USERS = {"U0123ABCDEF": "Ann Lee", "W0456GHIJKL": "Bo Grid"}
# Any Slack ID shape: a type letter and 8+ upper-case letters or digits.
SLACK_ID = re.compile(r"\b[UWCGDSBT][A-Z0-9]{8,}\b")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("<@U0123ABCDEF>", "@Ann Lee"),
        ("<@W0456GHIJKL>", "@Bo Grid"),
        ("<@U0123ABCDEF|ann>", "@Ann Lee"),
        ("<@U0999ZZZZZZ>", "@someone"),
        ("<@U0999ZZZZZZ|bob>", "@bob"),
        ("<#C0123ABCDEF|general>", "#general"),
        ("<#C0123ABCDEF>", "#a-channel"),
        ("<#C0123ABCDEF|>", "#a-channel"),
        ("<#G0123ABCDEF|private-ops>", "#private-ops"),
        ("<!here>", "@here"),
        ("<!here|here>", "@here"),
        ("<!channel>", "@channel"),
        ("<!everyone>", "@everyone"),
        ("<!subteam^S0123ABCDEF|@team>", "@team"),
        ("<!subteam^S0123ABCDEF>", "@a-group"),
        ("<!date^1392734382^{date_pretty} at {time}|Feb 18, 2014 at 6:39 AM>", "Feb 18, 2014 at 6:39 AM"),
        ("<!date^1392734382^{date}^https://x.io|Feb 18>", "Feb 18"),
        ("<https://example.com/a|the docs>", "[the docs](https://example.com/a)"),
        ("<https://example.com/a>", "https://example.com/a"),
        ("<https://example.com/a|https://example.com/a>", "https://example.com/a"),
        ("<mailto:a@b.io|a@b.io>", "a@b.io"),
        ("<mailto:a@b.io>", "a@b.io"),
        ("<mailto:a@b.io|Ann>", "Ann (a@b.io)"),
    ],
)
def test_each_construct_renders_readably(raw: str, expected: str) -> None:
    """Every Slack construct becomes the readable form the model sees."""
    assert render_text(f"x {raw} y", USERS) == f"x {expected} y"


def test_entities_are_unescaped_after_links_are_parsed() -> None:
    """&lt; &gt; &amp; become < > &, in URLs and labels too, without double-unescaping."""
    text = "a &lt; b &gt; c &amp;&amp; d &amp;lt;kept&amp;gt; <https://x.io/?a=1&amp;b=2|Q &amp; A>"
    assert render_text(text, {}) == "a < b > c && d &lt;kept&gt; [Q & A](https://x.io/?a=1&b=2)"


def test_escaped_brackets_are_not_mistaken_for_mentions() -> None:
    """Text a person typed as '<@U…>' arrives escaped and stays literal text, not a mention."""
    assert render_text("&lt;@U0123ABCDEF&gt;", USERS) == "<@U0123ABCDEF>"
    assert user_ids_in("&lt;@U0123ABCDEF&gt;") == set()


def test_display_names_are_not_unescaped() -> None:
    """A display name containing an entity-like string is inserted verbatim."""
    assert render_text("<@U1AAAAAAAA>", {"U1AAAAAAAA": "Tom &amp; Jerry"}) == "@Tom &amp; Jerry"


def test_blank_display_name_falls_back_to_label_or_someone() -> None:
    """An empty name in the map is treated as unknown."""
    users = {"U1AAAAAAAA": " "}
    assert render_text("<@U1AAAAAAAA|bo>", users) == "@bo"
    assert render_text("<@U1AAAAAAAA>", users) == "@someone"


def test_unknown_constructs_leak_no_ids() -> None:
    """An undocumented special command shows only its label, never its arguments."""
    assert render_text("<!unknown^U0123ABCDEF|label>", {}) == "label"
    assert render_text("<!unknown^U0123ABCDEF>", {}) == ""
    assert render_text("<!date^1392734382^{date}>", {}) == "a date"


def test_plain_text_is_unchanged() -> None:
    """Text without constructs or entities comes back as is."""
    text = "Deploy at 5pm? *bold* _it_ `code` U0123 is not an ID here"
    assert render_text(text, USERS) == text


def test_realistic_message_has_no_ids_left() -> None:
    """A message mixing every construct renders with no Slack ID anywhere."""
    text = (
        "<@U0123ABCDEF> can you check <#C0ABCDEF123|deploys> with <!subteam^S0ABCDEF123|@oncall>? "
        "<!here> see <https://ci.example.com/run/1?x=1&amp;y=2|run 1> and <@W0999ZZZZZZ|zed>, "
        "<@U0999ZZZZZZ>, <#C0999ZZZZZZ>, <!subteam^S0999ZZZZZZ> at <!date^1700000000^{time}|10:00>."
    )
    out = render_text(text, USERS)
    assert not SLACK_ID.search(out), out
    assert "<" not in out and ">" not in out
    assert out.startswith("@Ann Lee can you check #deploys with @oncall? @here see [run 1](")


def test_generated_messages_never_leak_ids() -> None:
    """Random mixes of mention constructs and text never leave an ID or an angle bracket."""
    rng = random.Random(42)

    def slack_id(prefix: str) -> str:
        return prefix + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(10))

    makers: list[Callable[[], str]] = [
        lambda: f"<@{slack_id('U')}>",
        lambda: f"<@{slack_id('W')}|{rng.choice(['al', 'bo', ''])}>",
        lambda: f"<#{slack_id('C')}|{rng.choice(['general', ''])}>",
        lambda: f"<#{slack_id('C')}>",
        lambda: f"<!subteam^{slack_id('S')}|@{rng.choice(['devs', 'ops'])}>",
        lambda: f"<!subteam^{slack_id('S')}>",
        lambda: rng.choice(["<!here>", "<!channel|channel>", "<!everyone>"]),
        lambda: "word",
        lambda: "&amp;",
    ]
    for _ in range(200):
        text = " ".join(rng.choice(makers)() for _ in range(rng.randint(1, 12)))
        known = {uid: "Known Person" for uid in list(user_ids_in(text))[:1]}
        out = render_text(text, known)
        assert not SLACK_ID.search(out), (text, out)
        assert "<" not in out and ">" not in out


def test_user_ids_in_finds_user_and_grid_mentions_only() -> None:
    """User IDs come from <@U…>/<@W…> mentions, labelled or not; channels and groups are ignored."""
    text = "<@U0123ABCDEF> <@W0456GHIJKL|bo> <@U0123ABCDEF> <#C0123ABCDEF|x> <!subteam^S0123ABCDEF> U0999ZZZZ"
    assert user_ids_in(text) == {"U0123ABCDEF", "W0456GHIJKL"}
    assert user_ids_in("no mentions") == set()


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        (
            {"name": "ann", "real_name": "Top", "profile": {"display_name": "Annie", "real_name": "Ann P"}},
            "Annie",
        ),
        ({"name": "ann", "real_name": "Top", "profile": {"display_name": "", "real_name": "Ann P"}}, "Ann P"),
        ({"name": "ann", "real_name": "Top", "profile": {"display_name": " "}}, "Top"),
        ({"name": "ann", "profile": {}}, "ann"),
        ({"name": "ann"}, "ann"),
        ({"profile": None}, "someone"),
        ({}, "someone"),
    ],
)
def test_display_name_prefers_display_then_real_then_username(user: dict[str, object], expected: str) -> None:
    """The name falls back from profile display name to real name to username to 'someone'."""
    assert display_name(user) == expected
