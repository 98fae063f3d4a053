"""The pieces an answer being streamed keeps track of (:mod:`channel.streaming`): each provider
message it shows, and the text each source has written."""

from __future__ import annotations

from dataclasses import dataclass, field

from .contract import LiveMessage, Posted


@dataclass(slots=True)
class StreamedMessage:
    """One provider message of the answer: part ``part`` of the split, from offset ``base`` of it."""

    part: int
    base: int
    effect_id: str
    shown: str = ""
    live: LiveMessage | None = None
    stream_effect: str = ""
    posted: Posted | None = None
    handle: str = ""
    #: False once stopped, closed by the provider, or posted whole.
    open: bool = False
    #: Closed by the provider (time, size) before all of its text was in: it may hold less than its
    #: part, and says how much when journalled.
    cut: bool = False


@dataclass(slots=True)
class Sources:
    """The text of each source, in the order they started."""

    order: list[str] = field(default_factory=list)
    text: dict[str, str] = field(default_factory=dict)

    def set(self, source: str, text: str) -> None:
        if source not in self.text:
            self.order.append(source)
        self.text[source] = text

    def joined(self) -> str:
        return "\n\n".join(t for s in self.order if (t := self.text[s]).strip())


def stable_end(text: str) -> int:
    """Where text that can no longer change ends: after the last whitespace (a word may be unfinished)."""
    return max(text.rfind(" "), text.rfind("\n"), text.rfind("\t")) + 1
