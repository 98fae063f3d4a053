"""The fault schedule's workload: its conversations and the scripted model that answers them.

Each conversation is a mention ``please help [c3:ask]`` in ``C1``: its key (``c3``) and its kind. The
model (an OpenAI-wire script for ``FakeOpenAI``) decides each answer from the history it is sent
alone, as the crash matrix's does, so a run resumed after a crash, or repeated, makes the same calls
again and shows in the thread what it repeated. Every answer carries a marker,
``ANSWER c3 <stage>``, once per thing the person asked for; the checker counts them.

Kinds:

- ``reply``: ``channel_reply`` with the answer;
- ``plain``: reads the channel, then answers with final text (posted, or streamed, by the host);
- ``steps``: a reaction, a temporary reply edited then retracted, a file fetched and attached, the
  answer as a reply (every kind of write but the streamed ones);
- ``ask``: ``channel_ask`` with two options; the person clicks one; the answer follows;
- ``approval``: ``channel_request_approval``; the person approves; the answer follows;
- ``follow_up``: ``channel_follow_up`` in a minute (the test makes it due at once), answers, and
  answers again when it fires.

``again``: after its first answer, the person writes in the thread once more and gets a second one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .fake_model import FakeOpenAI, Reply, message_text

KINDS = ("reply", "plain", "steps", "ask", "approval", "follow_up")
#: The kinds a person writes "again" in, after the first answer.
AGAIN_KINDS = ("reply", "plain", "steps")
AGAIN = "and again?"
PADDING = "the thread says what you hoped it would say. " * 3
_KEY = re.compile(r"\[(c\d+):(\w+)\]")
#: What starts a turn: the mention, a click's answer, a decision, a follow-up firing, a message.
_TRIGGERS = ("answered q_", "approved ap_", "denied ap_", "Follow-up you scheduled", AGAIN)


@dataclass(frozen=True)
class Conversation:
    key: str
    kind: str
    #: Seconds after the workload's start the person writes.
    start: float
    again: bool = False

    @property
    def mention(self) -> str:
        return f"<@UBOT> please help [{self.key}:{self.kind}]"

    def stages(self) -> list[str]:
        """The answers the person must see, once each."""
        stages = {
            "ask": ["after-answer"],
            "approval": ["after-approval"],
            "follow_up": ["first", "after-follow-up"],
        }.get(self.kind, ["first"])
        return [*stages, "again"] if self.again else stages

    def answer(self, stage: str) -> str:
        """The whole text of an answer as the person must see it."""
        return answer_text(self.key, stage, plain=self.kind in ("plain", "follow_up") or stage != "first")


def answer_text(key: str, stage: str, *, plain: bool) -> str:
    """Final text answers carry padding (a streamed one shows whether all of it arrived)."""
    head = f"ANSWER {key} {stage}"
    return f"{head}: {PADDING}".rstrip() if plain else f"{head}."


def marker(key: str, stage: str) -> str:
    return f"ANSWER {key} {stage}"


def _user_texts(messages: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(i, message_text(m)) for i, m in enumerate(messages) if m.get("role") == "user"]


def script(request: dict[str, Any]) -> Reply:
    """The model of every conversation of the workload; see the module docstring."""
    messages = request["messages"]
    users = _user_texts(messages)
    found = next((m for _, text in users if (m := _KEY.search(text))), None)
    if found is None:
        return FakeOpenAI.text("")
    key, kind = found.group(1), found.group(2)
    start, trigger = next(
        ((i, t) for i, t in reversed(users) if any(s in t for s in _TRIGGERS) or _KEY.search(t)), (0, "")
    )
    turn = messages[start + 1 :]
    calls = [c for m in turn if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    results = {m.get("tool_call_id"): message_text(m) for m in turn if m.get("role") == "tool"}
    if "answered q_" in trigger:
        return FakeOpenAI.text(answer_text(key, "after-answer", plain=True))
    if "approved ap_" in trigger or "denied ap_" in trigger:
        return FakeOpenAI.text(answer_text(key, "after-approval", plain=True))
    if "Follow-up you scheduled" in trigger:
        return FakeOpenAI.text(answer_text(key, "after-follow-up", plain=True))
    if AGAIN in trigger:
        return FakeOpenAI.text(answer_text(key, "again", plain=True))
    return _first_turn(key, kind, trigger, calls, results)


def _first_turn(key: str, kind: str, ask: str, calls: list[dict[str, Any]], results: dict[Any, str]) -> Reply:
    def handle(found: str | None, key: str = "message") -> str:
        value = 'msg_[^"]+' if key == "message" else '[^"]+'
        match = re.search(rf'"{key}":\s*"({value})"', found or "")
        return match.group(1) if match else ""

    def result(tool: str, text: str = "") -> str | None:
        """The result of a ``tool`` call (whose arguments hold ``text``) that gave a handle, else of
        the last one; None if never called."""
        found = [
            results.get(c["id"], "")
            for c in calls
            if c["function"]["name"] == tool and text in c["function"]["arguments"]
        ]
        return next((r for r in found if handle(r) or handle(r, "path")), found[-1] if found else None)

    def until(tool: str, args: dict[str, Any], ok: str) -> Reply | None:
        """Call ``tool`` until a result holds ``ok`` (a handle, an enabled tool), three times at most:
        a call cut off, refused or unknown is made again, as a model would."""
        found = [results.get(c["id"], "") for c in calls if c["function"]["name"] == tool]
        if any(ok in r for r in found) or len(found) >= 3:
            return None
        return FakeOpenAI.tool_call(tool, args)

    def search(query: str, tool: str) -> Reply | None:
        return until("tool_search", {"query": query, "limit": 6}, tool)

    if kind == "plain":
        if result("channel_read") is None:
            return FakeOpenAI.tool_call("channel_read")
        return FakeOpenAI.text(answer_text(key, "first", plain=True))
    if kind == "ask":
        question = {"question": f"Which one for {key}?", "options": ["staging", "prod"]}
        step = search("ask a question", "channel_ask") or until("channel_ask", question, '"q_')
        return step or FakeOpenAI.text("")
    if kind == "approval":
        step = search("request approval from a person", "channel_request_approval") or until(
            "channel_request_approval", {"action": f"deploy {key}"}, '"ap_'
        )
        return step or FakeOpenAI.text("")
    if kind == "follow_up":
        note = {"after": "1m", "note": f"check {key}"}
        step = search("remind follow up later", "channel_follow_up") or until(
            "channel_follow_up", note, '"fu_'
        )
        return step or FakeOpenAI.text(answer_text(key, "first", plain=True))
    if kind == "steps":
        step = _steps(key, ask, calls, result, handle)
        if step is not None:
            return step
    # reply (and the end of steps): the answer, until a result says it was posted.
    text = answer_text(key, "first", plain=False)
    posted = result("channel_reply", marker(key, "first"))
    if posted is not None and handle(posted):
        return FakeOpenAI.text("")
    return FakeOpenAI.tool_call("channel_reply", {"text": text})


def _steps(key: str, ask: str, calls: list[dict[str, Any]], result: Any, handle: Any) -> Reply | None:
    if result("channel_react") is None:
        asked = re.search(r"\"message\": \"(msg_[^\"]+)\"", ask)
        return FakeOpenAI.tool_call(
            "channel_react", {"message": asked.group(1) if asked else "", "emoji": "eyes"}
        )
    if result("tool_search") is None:
        query = "edit or retract my message, download a file, upload a file"
        return FakeOpenAI.tool_call("tool_search", {"query": query, "limit": 6})
    temp = result("channel_reply", "working on it")
    tries = sum("working on it" in c["function"]["arguments"] for c in calls)
    if temp is None or (not handle(temp) and tries < 3):  # not posted: a model says it again
        return FakeOpenAI.tool_call("channel_reply", {"text": f"working on it ({key})"})
    if handle(temp) and result("channel_edit") is None:
        return FakeOpenAI.tool_call(
            "channel_edit", {"message": handle(temp), "text": f"still working on it ({key})"}
        )
    if handle(temp) and result("channel_retract") is None:
        return FakeOpenAI.tool_call("channel_retract", {"message": handle(temp)})
    fetched = result("channel_fetch_file")
    if fetched is None:
        attached = re.search(r"\"file\": \"(file_[^\"]+)\"", ask)
        return FakeOpenAI.tool_call("channel_fetch_file", {"file": attached.group(1) if attached else ""})
    if handle(fetched, "path") and result("channel_attach") is None:
        return FakeOpenAI.tool_call(
            "channel_attach", {"path": handle(fetched, "path"), "title": f"report {key}"}
        )
    return None


def describe(conversations: list[Conversation]) -> str:
    return json.dumps(
        [f"{c.key}:{c.kind}{'+again' if c.again else ''}@{c.start:.1f}s" for c in conversations]
    )
