"""A plain-text rendition of Markdown, for notifications and clients without Markdown."""

from __future__ import annotations

import re
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.token import Token


@cache
def _parser() -> MarkdownIt:
    # CommonMark plus GFM tables and strikethrough: what chat Markdown renderers accept.
    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def plain_fallback(markdown: str, limit: int = 3000) -> str:
    """A plain-text rendition of ``markdown`` for notifications and clients without
    Markdown: emphasis, heading and quote markers dropped, links as ``label (url)``,
    list items as ``•``/``1.`` lines, code kept as its content; cut to ``limit``
    characters with a trailing ``…``."""
    if limit < 2:
        raise ValueError(f"limit must be at least 2, got {limit}")
    blocks: list[str] = []
    lists: list[Token] = []  # open list tokens, for indentation
    item_marker: str | None = None  # marker waiting for the item's first block
    row: list[str] | None = None  # cells of the table row being read
    fresh = True  # the next block starts a group (list, table, paragraph): blank line before it

    def emit(text: str, tight: bool) -> None:
        nonlocal fresh
        blocks.append(("\n" if tight and not fresh else "\n\n") + text)
        fresh = False

    for token in _parser().parse(markdown):
        kind = token.type
        if kind in ("bullet_list_open", "ordered_list_open"):
            fresh = fresh or not lists
            lists.append(token)
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
            fresh = not lists
        elif kind in ("table_open", "table_close"):
            fresh = True
        elif kind == "list_item_open":
            item_marker = "•" if token.markup in "-*+" else f"{token.info}{token.markup}"
        elif kind == "tr_open":
            row = []
        elif kind == "tr_close" and row is not None:
            emit(" | ".join(row), tight=True)
            row = None
        elif kind == "inline" and row is not None:
            row.append(_plain_inline(token.children or []).strip())
        elif kind == "inline":
            text = _plain_inline(token.children or [])
            indent = "  " * max(len(lists) - 1, 0)
            if item_marker is not None:
                text, item_marker = f"{indent}{item_marker} {text}", None
            elif lists:
                text = f"{indent}  {text}"
            emit(text, tight=bool(lists))
        elif kind in ("fence", "code_block", "html_block"):
            emit(token.content.rstrip("\n"), tight=bool(lists))
    text = "".join(blocks).strip()
    text = re.sub(r"\n{3,}", "\n\n", text)
    return _truncate(text, limit)


def _plain_inline(children: list[Token]) -> str:
    out: list[str] = []
    links: list[tuple[str, int]] = []  # (href, index in out where the label starts)
    for child in children:
        kind = child.type
        if kind in ("text", "code_inline", "html_inline"):
            out.append(child.content)
        elif kind == "softbreak":
            out.append(" ")
        elif kind == "hardbreak":
            out.append("\n")
        elif kind == "image":
            out.append(child.content)
        elif kind == "link_open":
            links.append((str(child.attrs.get("href", "")), len(out)))
        elif kind == "link_close" and links:
            href, at = links.pop()
            label = "".join(out[at:]).strip()
            if href and href not in (label, f"mailto:{label}"):
                out.append(f" ({href})" if label else href)
    return "".join(out)


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = max(head.rfind(" "), head.rfind("\n"))
    if space >= int(limit * 0.8):  # cut at a word boundary when it costs little
        head = head[:space]
    return head.rstrip() + "…"
