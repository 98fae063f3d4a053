"""Tests for channel.markdown: splitting, mass-mention neutralising, plain fallback."""

from __future__ import annotations

import random
import re

import pytest

from channel.markdown import MIN_LIMIT, plain_fallback, split_markdown
from channel.slack.render import strip_mass_mentions

# A fence marker line, also after quote markers or a list item's marker.
FENCE_LINE = re.compile(r"^[ \t>]*(?:(?:[-*+]|\d+[.)])[ \t]+)?(`{3,}|~{3,})")
WORDS = (
    "the agent reads a thread and replies with care while tools stay bound to one conversation "
    "so nothing leaks across channels and every handle is scoped to its task alone"
).split()


# -- helpers -----------------------------------------------------------------


def sentence(rng: random.Random, words: int = 12) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + rng.choice([".", ".", "!", "?"])


def paragraph(rng: random.Random, sentences: int = 4) -> str:
    return " ".join(sentence(rng, rng.randint(6, 16)) for _ in range(sentences))


def code_block(rng: random.Random, lines: int, info: str = "python") -> str:
    body = [f"    value_{i} = compute({i}, {rng.randint(0, 999)})  # step {i}" for i in range(lines)]
    return "\n".join([f"```{info}", *body, "```"])


def bullet_list(rng: random.Random, items: int) -> str:
    out: list[str] = []
    for _ in range(items):
        out.append(f"- {sentence(rng)}")
        if rng.random() < 0.5:
            out.append(f"  {sentence(rng)}")
    return "\n".join(out)


def table(rng: random.Random, rows: int) -> str:
    lines = ["| name | value | note |", "| --- | ---: | --- |"]
    lines += [f"| item {i} | {rng.randint(0, 9999)} | {rng.choice(WORDS)} |" for i in range(rows)]
    return "\n".join(lines)


def document(seed: int, target: int, *, tables: bool = True, big_code: bool = True) -> str:
    """A realistic model reply: sections of paragraphs, lists, quotes, code and tables."""
    rng = random.Random(seed)
    blocks: list[str] = [f"# Report {seed}", paragraph(rng)]
    section = 0
    while sum(len(b) + 2 for b in blocks) < target:
        section += 1
        blocks.append(f"## Section {section}")
        for _ in range(rng.randint(2, 5)):
            kind = rng.random()
            if kind < 0.4:
                blocks.append(paragraph(rng, rng.randint(2, 7)))
            elif kind < 0.6:
                blocks.append(bullet_list(rng, rng.randint(3, 9)))
            elif kind < 0.75:
                blocks.append(code_block(rng, rng.randint(3, 120 if big_code else 20)))
            elif kind < 0.85:
                blocks.append("> " + paragraph(rng, 2) + "\n>\n> " + sentence(rng))
            elif kind < 0.93 and tables:
                blocks.append(table(rng, rng.randint(2, 8)))
            else:
                blocks.append(f"### Detail {section}.{rng.randint(1, 9)}")
    return "\n\n".join(blocks) + "\n"


def content_words(text: str) -> list[str]:
    """The words of ``text`` with fence marker lines removed (reopened fences are added lines)."""
    kept = [line for line in text.split("\n") if not FENCE_LINE.match(line)]
    return "\n".join(kept).split()


def fence_count(part: str) -> int:
    return sum(1 for line in part.split("\n") if FENCE_LINE.match(line))


def assert_valid_parts(text: str, parts: list[str], limit: int) -> None:
    """The invariants every split must keep."""
    assert parts, "non-blank text gives at least one part"
    if len(text) <= limit:
        assert parts == [text], "text within the limit is returned as is"
        return
    for part in parts:
        assert part.strip(), "no empty part"
        assert len(part) <= limit, f"part of {len(part)} > {limit}"
        assert fence_count(part) % 2 == 0, f"unbalanced fences in part:\n{part}"
        lines = part.split("\n")
        assert lines[0].strip() and lines[-1].strip(), "no leading/trailing blank lines"
    assert content_words("\n".join(parts)) == content_words(text), "content kept, in order"


# -- split_markdown ----------------------------------------------------------


def test_short_text_is_returned_unchanged() -> None:
    """Text within the limit comes back as the single, untouched part."""
    text = "# Hi\n\nA *short* reply.\n\n"
    assert split_markdown(text, 100) == [text]


def test_blank_text_gives_no_parts() -> None:
    """Empty or whitespace-only text gives no parts rather than an empty message."""
    assert split_markdown("") == []
    assert split_markdown(" \n\n\t") == []


def test_limit_below_minimum_is_refused() -> None:
    """A limit too small to hold a fence's reopen and close lines is a programming error."""
    with pytest.raises(ValueError):
        split_markdown("x" * 100, MIN_LIMIT - 1)


@pytest.mark.parametrize("limit", [8000, 3000, 1000, 400])
def test_realistic_document_parts_are_valid(limit: int) -> None:
    """A mixed document splits into parts within the limit, each with balanced fences."""
    text = document(1, 12_000)
    parts = split_markdown(text, limit)
    assert len(parts) > 1
    assert_valid_parts(text, parts, limit)


def test_30k_document_round_trips_in_order() -> None:
    """A 30k-character document splits into few full parts whose content is the original, in order."""
    text = document(7, 30_000, big_code=False)
    assert len(text) >= 30_000
    parts = split_markdown(text, 8000)
    assert_valid_parts(text, parts, 8000)
    assert len(parts) <= len(text) // 3200 + 1, "parts are reasonably full"
    # Without over-long blocks nothing is reopened: the parts are exactly the text's blocks.
    assert "\n\n".join(parts).split() == text.split()


def test_long_code_block_is_split_and_reopened_with_info_string() -> None:
    """A fence longer than the limit is cut at line boundaries, closed, and reopened as ```python."""
    rng = random.Random(3)
    code = code_block(rng, 200)
    text = f"Intro paragraph.\n\n{code}\n\nOutro paragraph."
    parts = split_markdown(text, 1000)
    assert len(parts) >= 10
    assert_valid_parts(text, parts, 1000)
    code_lines = code.split("\n")[1:-1]
    seen: list[str] = []
    for index, part in enumerate(parts):
        lines = part.split("\n")
        if 0 < index < len(parts) - 1:
            assert lines[0] == "```python", "reopened with the info string"
            assert lines[-1] == "```", "closed at the end of the part"
        seen += [line for line in lines if line.startswith("    value_")]
    assert seen == code_lines, "every code line once, in order, never cut mid-line"


def test_tilde_and_long_backtick_fences_are_reopened_with_their_own_marker() -> None:
    """A ~~~ or ```` fence is closed and reopened with the same marker it opened with."""
    body = "\n".join(f"line {i} " + "x" * 30 for i in range(60))
    for opener, marker in (("~~~text", "~~~"), ("````md", "````")):
        text = f"{opener}\n```\ninner fence line\n```\n{body}\n{marker}\n"
        parts = split_markdown(text, 500)
        assert len(parts) > 2
        for part in parts[1:]:
            assert part.split("\n")[0] == opener
        for part in parts[:-1]:
            assert part.split("\n")[-1] == marker


def test_fence_inside_block_quote_is_reopened_inside_the_quote() -> None:
    """A fence in a block quote is reopened with the quote marker, so it stays quoted."""
    body = "\n".join(f"> print({i})  # " + "y" * 40 for i in range(40))
    text = f"> ```python\n{body}\n> ```"
    parts = split_markdown(text, 600)
    assert len(parts) > 1
    assert_valid_parts(text, parts, 600)
    for part in parts:
        assert all(line.startswith(">") for line in part.split("\n"))
        assert part.split("\n")[0] == "> ```python"


def test_fence_inside_list_item_is_reopened_as_indentation_not_a_new_item() -> None:
    """A list item's fence is reopened indented, without repeating the list marker."""
    body = "\n".join(f"  step_{i}()  # " + "z" * 40 for i in range(40))
    text = f"- ```sh\n{body}\n  ```"
    parts = split_markdown(text, 600)
    assert len(parts) > 1
    assert_valid_parts(text, parts, 600)
    assert all(part.startswith("  ```sh\n") for part in parts[1:])


def test_headings_are_preferred_break_points() -> None:
    """When a heading fits, a part ends right before it rather than inside a section."""
    rng = random.Random(11)
    sections = []
    for n in range(6):
        paras: list[str] = []
        while sum(len(p) + 2 for p in paras) < 430:
            paras.append(paragraph(rng, 1))
        sections.append(f"## Part {n}\n\n" + "\n\n".join(paras))
    text = "\n\n".join(sections)
    parts = split_markdown(text, 1000)
    assert_valid_parts(text, parts, 1000)
    assert all(part.startswith("## Part") for part in parts), [p[:20] for p in parts]
    assert len(parts) == 3, "two ~450-char sections per part"


def test_top_level_blocks_preferred_over_list_items() -> None:
    """A top-level break at half the limit beats list-item breaks that would fill the part more."""
    rng = random.Random(5)
    intro = paragraph(rng, 1)
    while len(intro) < 500:
        intro += " " + sentence(rng)
    items = [f"- item {i}: " + "x" * 80 for i in range(20)]
    text = intro + "\n\n" + "\n".join(items)
    parts = split_markdown(text, 1000)
    assert_valid_parts(text, parts, 1000)
    assert parts[0] == intro


def test_list_items_are_not_broken_mid_item() -> None:
    """A long list is cut between items, never inside a multi-line item."""
    rng = random.Random(2)
    items = [f"- {sentence(rng)}\n  {sentence(rng)}\n  {sentence(rng)}" for _ in range(40)]
    text = "\n".join(items)
    parts = split_markdown(text, 900)
    assert len(parts) > 3
    assert_valid_parts(text, parts, 900)
    for part in parts:
        lines = part.split("\n")
        assert len(lines) % 3 == 0, "whole three-line items only"
        assert all(line.startswith("- ") == (n % 3 == 0) for n, line in enumerate(lines))


def test_a_heading_never_ends_a_part() -> None:
    """A heading stays with the block after it: no part but the last ends with a heading line."""
    for seed in range(15):
        text = document(seed, 20_000)
        for limit in (1000, 3000, 8000):
            parts = split_markdown(text, limit)
            assert not any(part.split("\n")[-1].startswith("#") for part in parts[:-1])


def test_nested_list_items_break_at_the_shallowest_item() -> None:
    """In a nested list the cut falls before a top-level item when one fits well."""
    rng = random.Random(4)
    items: list[str] = []
    for _ in range(12):
        items.append(f"- {sentence(rng)}")
        items += [f"  - {sentence(rng)}" for _ in range(3)]
    text = "\n".join(items)
    parts = split_markdown(text, 800)
    assert_valid_parts(text, parts, 800)
    assert all(part.startswith("- ") for part in parts)


def test_long_paragraph_is_split_at_sentence_ends() -> None:
    """A single paragraph longer than the limit is cut after sentences, not mid-word."""
    rng = random.Random(9)
    text = paragraph(rng, 80)
    assert "\n" not in text and len(text) > 3000
    parts = split_markdown(text, 700)
    assert_valid_parts(text, parts, 700)
    assert all(part[-1] in ".!?" for part in parts)
    assert " ".join(parts) == text


def test_long_paragraph_without_sentences_is_split_at_whitespace() -> None:
    """A paragraph with no sentence ends is cut at spaces, keeping every word whole."""
    text = " ".join(f"word{i}" for i in range(800))
    parts = split_markdown(text, 500)
    assert_valid_parts(text, parts, 500)
    assert " ".join(parts) == text


def test_unbreakable_run_is_cut_hard_as_last_resort() -> None:
    """A single token longer than the limit (a huge URL) is cut by length and loses nothing."""
    text = "See https://example.com/" + "a" * 2500 + " done."
    parts = split_markdown(text, 1000)
    assert len(parts) == 3
    assert all(0 < len(part) <= 1000 for part in parts)
    assert "".join(parts).replace(" ", "") == text.replace(" ", "")


def test_long_table_is_split_between_rows_with_header_repeated() -> None:
    """A table longer than the limit is cut between rows and each part repeats the header."""
    rng = random.Random(8)
    text = table(rng, 120)
    header = text.split("\n")[:2]
    parts = split_markdown(text, 600)
    assert len(parts) > 3
    rows: list[str] = []
    for part in parts:
        assert len(part) <= 600
        lines = part.split("\n")
        assert lines[:2] == header
        rows += lines[2:]
    assert rows == text.split("\n")[2:]


def test_crlf_input_is_normalised() -> None:
    """Windows line endings are split like Unix ones and come back as \\n."""
    text = document(12, 3000, big_code=False)
    parts = split_markdown(text.replace("\n", "\r\n"), 800)
    assert parts == split_markdown(text, 800)
    assert not any("\r" in part for part in parts)


def test_link_reference_definitions_are_kept() -> None:
    """Lines with no token of their own (link reference definitions) are still in some part."""
    rng = random.Random(13)
    refs = "\n".join(f"[ref{i}]: https://example.com/{i}" for i in range(10))
    text = f"{paragraph(rng, 10)}\n\n{refs}\n\n{paragraph(rng, 10)}"
    parts = split_markdown(text, 600)
    assert_valid_parts(text, parts, 600)


@pytest.mark.parametrize("seed", range(25))
def test_generated_documents_keep_every_invariant(seed: int) -> None:
    """Random documents at random limits always give valid, complete, in-order parts."""
    rng = random.Random(1000 + seed)
    text = document(seed, rng.randint(500, 15_000), tables=False)
    limit = rng.choice([MIN_LIMIT, 150, 300, 700, 1500, 4000, 8000])
    assert_valid_parts(text, split_markdown(text, limit), limit)


# -- strip_mass_mentions ---------------------------------------------------------

MASS = re.compile(r"<!(here|channel|everyone|subteam)|(?<![\w.+-])@(here|channel|everyone)\b", re.I)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("<!here>", "@\u200bhere"),
        ("<!channel>", "@\u200bchannel"),
        ("<!everyone>", "@\u200beveryone"),
        ("<!here|here>", "@\u200bhere"),
        ("<!channel|@channel>", "@\u200bchannel"),
        ("<!everyone|everyone>", "@\u200beveryone"),
        ("<!subteam^S0123ABCD|@devs>", "@\u200bdevs"),
        ("<!subteam^S0123ABCD>", "@\u200bgroup"),
        ("@here", "@\u200bhere"),
        ("@channel", "@\u200bchannel"),
        ("@everyone", "@\u200beveryone"),
        ("@HERE", "@\u200bHERE"),
        ("<!HERE>", "@\u200bhere"),
    ],
)
def test_each_mass_mention_form_is_neutralised(raw: str, expected: str) -> None:
    """Every mass-mention form becomes '@' + zero-width space + word, which pings nobody."""
    out = strip_mass_mentions(f"Hey {raw}, look.")
    assert out == f"Hey {expected}, look."
    assert not MASS.search(out)
    assert "S0123ABCD" not in out


def test_mass_mentions_are_neutralised_everywhere_in_a_document() -> None:
    """Mentions in headings, lists, quotes and code are all neutralised."""
    text = "# @here\n\n- <!channel> now\n\n> @everyone (@here)\n\n```\n<!here|here> @channel\n```\n"
    out = strip_mass_mentions(text)
    assert not MASS.search(out)
    assert out.count("\u200b") == 6


def test_ordinary_text_and_addresses_are_untouched() -> None:
    """E-mail addresses, longer words, user mentions and other constructs are left alone."""
    text = "Mail ops@here.com or me@channel.io; @herebefore, <@U0123ABCD>, <!date^1^{date}|today>, here."
    assert strip_mass_mentions(text) == text


def test_strip_mass_mentions_is_idempotent() -> None:
    """Neutralising twice changes nothing more."""
    once = strip_mass_mentions("<!here> @channel <!subteam^S1|@team>")
    assert strip_mass_mentions(once) == once


# -- plain_fallback ------------------------------------------------------------


def test_plain_fallback_strips_markdown_syntax() -> None:
    """Emphasis, heading markers and link syntax go; links read as 'label (url)'."""
    text = "# Title\n\nSome **bold**, _em_ and ~~old~~ text with [docs](https://x.io/a?b=1).\n"
    assert plain_fallback(text) == "Title\n\nSome bold, em and old text with docs (https://x.io/a?b=1)."


def test_plain_fallback_keeps_code_as_content() -> None:
    """Fenced and inline code keep their text without the fence or backticks."""
    text = "Run `make`:\n\n```sh\nmake test\n```\n"
    assert plain_fallback(text) == "Run make:\n\nmake test"


def test_plain_fallback_lists_autolinks_and_tables() -> None:
    """Lists become bullet lines, autolinks their URL, tables pipe-separated rows."""
    text = "- one <https://a.b>\n- two <x@y.z>\n\n1. first\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert plain_fallback(text) == "• one https://a.b\n• two x@y.z\n\n1. first\n\na | b\n1 | 2"


def test_plain_fallback_is_cut_with_an_ellipsis() -> None:
    """Long text is cut within the limit at a word boundary, ending with an ellipsis."""
    text = " ".join(f"word{i}" for i in range(2000))
    out = plain_fallback(text, 300)
    assert len(out) <= 300
    assert out.endswith("…")
    assert out[:-1].split()[-1].startswith("word")
    assert text.startswith(out[:-1])


def test_plain_fallback_short_text_is_not_cut() -> None:
    """Text within the limit has no ellipsis."""
    assert plain_fallback("Hello there.", 3000) == "Hello there."
