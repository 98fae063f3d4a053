"""Provider-neutral Markdown helpers for outgoing text: splitting, mass-mention
neutralising and a plain-text fallback (``plain_fallback``, in ``channel.plain_text``).

Nothing here knows about Slack's API; the limits are parameters. The splitter
works on markdown-it-py's block token stream (``token.map`` line ranges), so it
cuts between headings, blocks, list items and table rows, and inside a code
fence only at line boundaries, closing and reopening the fence.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

from .plain_text import plain_fallback

__all__ = ["plain_fallback", "split_markdown", "strip_mass_mentions"]

# Smallest accepted part size: below this a fence's reopen/close lines could
# crowd out the content and the splitter could stop making progress.
MIN_LIMIT = 64

# A structural break is taken only when the part before it is at least this
# full; otherwise a tiny part ("# Heading" alone) would be posted. When no
# break reaches it, the farthest break that fits is used.
_MIN_FILL = 0.4

# Break ranks, lower is better; the second element of a rank is the token's
# nesting level, so shallower breaks win within a kind.
_HEADING = 0  # before a top-level heading
_BLOCK = 1  # before any other top-level block
_ITEM = 2  # before a list item
_NESTED = 3  # before a block nested in a list item or quote
_ROW = 4  # between table rows (header repeated)
_CODE_LINE = 5  # between lines of a code fence, indented code or HTML block
_TEXT_LINE = 6  # between lines of one paragraph
_AFTER_HEADING = 7  # between a heading and its first block: a heading should not end a part

_BLOCK_TYPES = frozenset(
    {
        "paragraph_open",
        "heading_open",
        "blockquote_open",
        "bullet_list_open",
        "ordered_list_open",
        "list_item_open",
        "table_open",
        "fence",
        "code_block",
        "html_block",
        "hr",
    }
)

# Sentence end: terminal punctuation, optional closing quotes/brackets, then whitespace.
_SENTENCE_END = re.compile(r"[.!?…][\"'’”)\]]*(?=\s)")
_WORD = re.compile(r"[^ \t\n]*")
_LEADING_BLANK = re.compile(r"\A(?:[ \t]*\n)+")
_TRAILING_BLANK = re.compile(r"(?:\n[ \t]*)+\Z")


@cache
def _block_parser() -> MarkdownIt:
    # Splitting needs only block tokens; skipping inline parsing halves the work.
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).disable("inline")


@dataclass(frozen=True, slots=True)
class _Context:
    """What a part must add when a cut falls inside a block: ``reopen`` starts the
    next part (a fence opener, a table header), ``close`` ends the previous one."""

    reopen: str
    close: str = ""


@dataclass(frozen=True, slots=True)
class _Fence:
    open_start: int  # offset of the opening fence line
    content_start: int  # offset of the first content line
    content_end: int  # offset of the closing fence line (or the block end if unclosed)
    context: _Context


@dataclass(frozen=True, slots=True)
class _Break:
    rank: tuple[int, int]
    context: _Context | None = None


def split_markdown(text: str, limit: int = 8000) -> list[str]:
    """Split ``text`` into parts of at most ``limit`` characters at Markdown structure
    boundaries.

    Breaks are preferred before top-level headings, then between top-level
    blocks, then between list items, then inside blocks (table rows, code lines,
    paragraph lines); only a single block longer than the limit is cut inside a
    line, at a sentence end or whitespace, or hard as a last resort. A heading is
    kept with the block after it whenever another break fits. A code fence
    cut in two is closed at the end of one part and reopened, with its info
    string, at the start of the next; a table cut in two repeats its header.
    Parts keep the original text (line endings normalised to ``\\n``), without
    leading or trailing blank lines, and are never empty: blank ``text`` gives
    ``[]``, and text within the limit is returned unchanged as ``[text]``.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, got {limit}")
    if not text.strip():
        return []
    if len(text) <= limit:
        return [text]
    return _Splitter(text.replace("\r\n", "\n").replace("\r", "\n"), limit).run()


class _Splitter:
    """One split of one text: the candidate breaks from the token stream, then a
    greedy walk that takes the best break fitting in each part."""

    def __init__(self, src: str, limit: int) -> None:
        self.src = src
        self.limit = limit
        self.line_starts = [0, *(m.end() for m in re.finditer("\n", src))]
        # content_ends[i]: where the last non-blank line before line i ends, so a part's
        # size (trailing blank lines trimmed) is plain arithmetic for each candidate break.
        self.content_ends: list[int] = []
        end = 0
        for start, line in zip(self.line_starts, src.split("\n"), strict=True):
            self.content_ends.append(end)
            if line.strip(" \t"):  # blank means what _LEADING_BLANK/_TRAILING_BLANK match
                end = start + len(line)
        self.content_ends.append(end)
        self.breaks: dict[int, _Break] = {}
        self.fences: list[_Fence] = []
        self._collect(_block_parser().parse(src))
        self.offsets = sorted(self.breaks)

    # -- candidate breaks -------------------------------------------------

    def _offset(self, line: int) -> int:
        return self.line_starts[line] if line < len(self.line_starts) else len(self.src)

    def _line(self, line: int) -> str:
        start = self._offset(line)
        end = self.src.find("\n", start)
        return self.src[start : end if end >= 0 else len(self.src)]

    def _add(self, line: int, rank: tuple[int, int], context: _Context | None = None) -> None:
        offset = self._offset(line)
        if not 0 < offset < len(self.src):
            return
        known = self.breaks.get(offset)
        if known is None or rank < known.rank:
            self.breaks[offset] = _Break(rank, context)

    def _collect(self, tokens: list[Token]) -> None:
        table_start, table_header, first_row = 0, None, True
        previous_top = ""  # type of the previous top-level block
        for token in tokens:
            if token.map is None:
                continue
            start, end = token.map
            level = token.level
            if token.type in _BLOCK_TYPES:
                if level == 0:
                    if previous_top == "heading_open":
                        self._add(start, (_AFTER_HEADING, 0))
                    else:
                        self._add(start, (_HEADING if token.type == "heading_open" else _BLOCK, 0))
                    previous_top = token.type
                elif token.type == "list_item_open":
                    self._add(start, (_ITEM, level))
                else:
                    self._add(start, (_NESTED, level))
            if token.type == "fence":
                self._collect_fence(token, start, end)
            elif token.type in ("code_block", "html_block"):
                for line in range(start + 1, end):
                    self._add(line, (_CODE_LINE, level))
            elif token.type == "paragraph_open":
                for line in range(start + 1, end):
                    self._add(line, (_TEXT_LINE, level))
            elif token.type == "table_open":
                table_start, table_header, first_row = start, None, True
            elif token.type == "tbody_open":
                # Header row plus delimiter row: everything from the table start to the body.
                header = "\n".join(self._line(n) for n in range(table_start, start))
                table_header = self._bounded(_Context(header))
            elif token.type == "tr_open" and table_header is not None:
                if not first_row:
                    self._add(start, (_ROW, level), table_header)
                first_row = False

    def _collect_fence(self, token: Token, start: int, end: int) -> None:
        opener = self._line(start)
        at = opener.find(token.markup)
        # Keep quote markers so a fence in a block quote stays in it; list markers become
        # indentation so the reopened fence does not start a new list item.
        indent = "".join(ch if ch in ">\t" else " " for ch in opener[:at])
        context = self._bounded(_Context(indent + opener[at:].rstrip(), indent + token.markup))
        closing = self._line(end - 1).lstrip(" \t>")
        closed = end - start >= 2 and re.fullmatch(
            rf"{re.escape(token.markup[0])}{{{len(token.markup)},}}[ \t]*", closing
        )
        content_end_line = end - 1 if closed else end
        if context is not None:
            self.fences.append(
                _Fence(self._offset(start), self._offset(start + 1), self._offset(content_end_line), context)
            )
        # No break right after the opener: that part would be an empty code block.
        for line in range(start + 2, content_end_line):
            self._add(line, (_CODE_LINE, token.level), context)

    def _bounded(self, context: _Context) -> _Context | None:
        # A context too long for the limit is dropped (the block is then cut bare),
        # so every part keeps room for content and the walk always advances.
        if len(context.reopen) + len(context.close) + 2 > self.limit // 2:
            return None
        return context

    # -- the greedy walk --------------------------------------------------

    def _body(self, start: int, end: int) -> str:
        body = _LEADING_BLANK.sub("", self.src[start:end])
        return _TRAILING_BLANK.sub("", body)

    def _render(self, start: int, end: int, reopen: _Context | None, close: _Context | None) -> str:
        body = self._body(start, end)
        if not body.strip(" \t\n"):
            return ""
        pieces = [reopen.reopen] if reopen else []
        pieces.append(body)
        if close and close.close:
            pieces.append(close.close)
        return "\n".join(pieces)

    def _skip_blank(self, offset: int) -> int:
        match = _LEADING_BLANK.match(self.src, offset)
        return match.end() if match else offset

    def _fence_at(self, offset: int) -> _Fence | None:
        """The fence whose content a cut at ``offset`` falls in."""
        for fence in self.fences:
            if fence.content_start <= offset <= fence.content_end:
                return fence
        return None

    def _fence_around(self, offset: int) -> _Fence | None:
        """The fence a part starting at ``offset`` could end inside (opener line included)."""
        for fence in self.fences:
            if fence.open_start <= offset <= fence.content_end:
                return fence
        return None

    def run(self) -> list[str]:
        parts: list[str] = []
        start, reopen = self._skip_blank(0), None
        while start < len(self.src):
            rest = self.content_ends[-1] - start
            if rest <= 0 or rest + (len(reopen.reopen) + 1 if reopen else 0) <= self.limit:
                if tail := self._render(start, len(self.src), reopen, None):
                    parts.append(tail)
                break
            cut = self._best_break(start, reopen)
            if cut is not None:
                context = self.breaks[cut].context
                part, resume = self._render(start, cut, reopen, context), cut
            else:
                cut, resume, context = self._inline_cut(start, reopen)
                part = self._render(start, cut, reopen, context)
            if part:
                parts.append(part)
            start, reopen = self._skip_blank(resume), context
        return parts

    def _best_break(self, start: int, reopen: _Context | None) -> int | None:
        """The best structural break that keeps the part within the limit, if any.

        ``start`` is never on a blank line, so the part is ``src[start:content end]``
        plus the reopen/close lines; its size equals ``len(self._render(...))``."""
        fitting: list[tuple[int, int]] = []  # (offset, size)
        extra = len(reopen.reopen) + 1 if reopen else 0
        for index in range(bisect_right(self.offsets, start), len(self.offsets)):
            offset = self.offsets[index]
            body = self.content_ends[bisect_left(self.line_starts, offset)] - start
            if body > self.limit:
                break  # every later break includes this content too
            if body <= 0:
                continue
            context = self.breaks[offset].context
            size = extra + body + (len(context.close) + 1 if context and context.close else 0)
            if size <= self.limit:
                fitting.append((offset, size))
        if not fitting:
            return None
        full = [offset for offset, size in fitting if size >= _MIN_FILL * self.limit]
        if not full:
            return fitting[-1][0]
        return min(full, key=lambda offset: (self.breaks[offset].rank, -offset))

    def _inline_cut(self, start: int, reopen: _Context | None) -> tuple[int, int, _Context | None]:
        """Cut inside one over-long block: returns (cut, resume offset, context at the cut)."""
        around = self._fence_around(start)
        room = self.limit - (len(reopen.reopen) + 1 if reopen else 0)
        room -= len(around.context.close) + 1 if around else 0
        cut = start + self._inline_offset(start, room)
        # Drop the whitespace at the cut, but not the next line's indentation.
        resume = cut
        while resume < len(self.src) and self.src[resume] in " \t":
            resume += 1
        if resume < len(self.src) and self.src[resume] == "\n":
            resume += 1
        inside = self._fence_at(cut)
        return cut, resume, inside.context if inside else None

    def _inline_offset(self, start: int, room: int) -> int:
        """Where to cut the next ``room`` characters: the last line break or sentence
        end well into them, else the last whitespace (unless the word after it could
        not fit a part anyway), else a hard cut at ``room``."""
        window = self.src[start : start + room]
        least = int(len(window) * _MIN_FILL)
        newline = window.rfind("\n")
        if newline >= least and window[:newline].strip():
            return newline
        sentences = [m.end() for m in _SENTENCE_END.finditer(window) if m.end() >= least]
        if sentences:
            return sentences[-1]
        space = max(window.rfind(" "), window.rfind("\t"), newline)
        if space > 0 and window[:space].strip():
            word = _WORD.match(self.src, start + space + 1)
            if space >= least or (word is not None and word.end() - word.start() <= room):
                return space
        return len(window)


#: ZERO WIDTH SPACE: after an ``@`` it keeps the word readable but stops it pinging anyone.
ZWSP = "\u200b"
# A bare word after "@", not part of an e-mail address or a longer word.
_BARE_MENTION = re.compile(r"(?<![\w.+-])@(channel|here|everyone)\b", re.IGNORECASE)


def strip_mass_mentions(text: str) -> str:
    """Neutralise the provider-neutral mass mentions: bare ``@here``/``@channel``/``@everyone``
    become ``@`` + ZERO WIDTH SPACE + the word, which reads the same but pings nobody.

    Applied everywhere, code included, because a ping is never wanted. Idempotent. A provider's
    own mention syntax is its adapter's business (Slack: ``channel.slack.render.strip_mass_mentions``).
    """
    return _BARE_MENTION.sub(lambda m: "@" + ZWSP + m.group(1), text)
