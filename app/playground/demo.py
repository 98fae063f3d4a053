"""The demo model (``--demo``): an echo, not an LLM, so the playground runs with no key at all.

Each turn it first acts as an agent would, with the channel tools it is offered: it reacts 👀 to
the newest message (``channel_react``) and reads the thread (``channel_read``), so the page shows
the steps and the reaction. Then it answers with a labelled quote of what it was sent (the prompt
exactly as the model sees it) and what its tools did, as final text streamed a few words at a time
like a real model's, so the answer grows in the thread and gets its feedback buttons. Asked to
"remind" or "follow up", it finds ``channel_follow_up`` with ``tool_search`` and schedules one 20
minutes ahead (the page's fast-forward fires it). Asked "ask me" it finds ``channel_ask`` and asks
a question with two option buttons; asked "request approval" it posts an Approve/Deny card
(``channel_request_approval``); either ends its turn and the click resumes it with the answer. Sent a
file, it fetches it (``channel_fetch_file``) and attaches it back (``channel_attach``), both found
with ``tool_search``. It shows the wiring, not intelligence.

The playground's empty conversation offers one example prompt per feature (``EXAMPLES``); the README
names them.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

from pydantic_ai import messages as _messages
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

LABEL = "**Demo model** — an echo, not an LLM. Set `MODEL` (and its key) for real answers."
#: Words that make the demo schedule a follow-up.
_REMIND = re.compile(r"\b(remind|follow[ -]?up)", re.IGNORECASE)
#: The example prompts the playground's empty conversation offers: (what it shows, the words). Each
#: is a trigger above; "a file" is sent with a small text file attached.
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("a step and a reaction", "Hello! What can you do?"),
    ("a question", "Ask me which option to pick"),
    ("an approval", "Request approval to post an announcement"),
    ("a follow-up", "Remind me to check the release in 20 minutes"),
    ("a file", "Here is a file: send it back to me"),
)
#: A message handle, for prompts that are not JSON lines.
_HANDLE = re.compile(r"\b(msg_[A-Za-z0-9_-]{6,})")


def _user_text(request: _messages.ModelRequest) -> str:
    texts = [
        p.content
        for p in request.parts
        if isinstance(p, _messages.UserPromptPart)
        and isinstance(p.content, str)
        and not p.content.startswith("<system>")
    ]
    return "\n".join(texts)


def _prompt(messages: list[_messages.ModelMessage]) -> str:
    """The person's words in the newest request ("" when it carries only tool results)."""
    last = messages[-1] if messages else None
    return _user_text(last) if isinstance(last, _messages.ModelRequest) else ""


def _turn_prompt(messages: list[_messages.ModelMessage]) -> str:
    """The words that started this turn: the newest request that has any."""
    for message in reversed(messages):
        if isinstance(message, _messages.ModelRequest) and (text := _user_text(message)):
            return text
    return ""


def _newest_row(prompt: str, key: str) -> str | None:
    """``key`` of the newest message in the prompt that has it as text (one JSON object per message,
    as the app writes them); None when no line has it."""
    for line in reversed(prompt.splitlines()):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get(key), str):
            return str(row[key])
    return None


def _newest_handle(prompt: str) -> str:
    """The handle of the newest message in the prompt (else the last handle-shaped word)."""
    found = _newest_row(prompt, "message")
    if found is not None:
        return found
    handles = _HANDLE.findall(prompt)
    return handles[-1] if handles else ""


def _newest_text(prompt: str) -> str:
    """The text of the newest message in the prompt (its JSON row's ``text``; else the whole prompt)."""
    found = _newest_row(prompt, "text")
    return prompt if found is None else found


#: What the demo asks for when a message says so: (trigger, tool, its arguments).
_ASKS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("ask me", "channel_ask", {"question": "Which one should I pick?", "options": ["This one", "That one"]}),
    ("request approval", "channel_request_approval", {"action": "Post a *demo* announcement"}),
)


def _wanted_ask(prompt: str) -> tuple[str, dict[str, object]] | None:
    lowered = prompt.lower()
    return next(((tool, args) for trigger, tool, args in _ASKS if trigger in lowered), None)


def _ask_calls(messages: list[_messages.ModelMessage], info: AgentInfo) -> list[_messages.ToolCallPart]:
    """Once tool_search enabled the tool a message asked for: the ask (the turn ends with it)."""
    wanted = _wanted_ask(_turn_prompt(messages))
    last = messages[-1] if messages else None
    searched = isinstance(last, _messages.ModelRequest) and any(
        isinstance(p, _messages.ToolReturnPart) and p.tool_name == "tool_search" for p in last.parts
    )
    if wanted is None or not searched or wanted[0] not in {t.name for t in info.function_tools}:
        return []
    return [_messages.ToolCallPart(wanted[0], dict(wanted[1]))]


def _calls(prompt: str, info: AgentInfo) -> list[_messages.ToolCallPart]:
    """The tools a turn starts with: a 👀 on the newest message, then a read of the thread (and a
    tool_search for the ask a message wants)."""
    offered = {t.name for t in info.function_tools}
    calls = []
    wanted = _wanted_ask(prompt)
    if wanted is not None and wanted[0] in offered:  # enabled by an earlier turn
        calls.append(_messages.ToolCallPart(wanted[0], dict(wanted[1])))
    elif wanted is not None and "tool_search" in offered:
        calls.append(_messages.ToolCallPart("tool_search", {"query": wanted[0], "limit": 1}))
    handle = _newest_handle(prompt)
    if "channel_react" in offered and handle:
        calls.append(_messages.ToolCallPart("channel_react", {"message": handle, "emoji": "eyes"}))
    if "channel_read" in offered:
        calls.append(_messages.ToolCallPart("channel_read", {"limit": 15}))
    return calls


def _turn_tools(messages: list[_messages.ModelMessage]) -> set[str]:
    """The tools whose results came back since the words that started this turn."""
    done: set[str] = set()
    for message in reversed(messages):
        if not isinstance(message, _messages.ModelRequest):
            continue
        done |= {p.tool_name for p in message.parts if isinstance(p, _messages.ToolReturnPart)}
        if _user_text(message):
            break
    return done


def _follow_up_calls(
    messages: list[_messages.ModelMessage], info: AgentInfo
) -> list[_messages.ToolCallPart] | None:
    """Asked to remind: find channel_follow_up with tool_search, then schedule one 20 minutes ahead."""
    prompt = _turn_prompt(messages)
    if not _REMIND.search(prompt) or "Follow-up you scheduled" in prompt:
        return None
    offered, done = {t.name for t in info.function_tools}, _turn_tools(messages)
    if "channel_follow_up" in done:
        return None
    if "channel_follow_up" in offered:
        words = " ".join(_newest_text(prompt).split())[-300:]
        return [
            _messages.ToolCallPart("channel_follow_up", {"after": "20m", "note": f"Follow up on: {words}"})
        ]
    if "tool_search" in offered and "tool_search" not in done:
        return [_messages.ToolCallPart("tool_search", {"query": "schedule a follow-up reminder", "limit": 3})]
    return None


def _turn_calls(messages: list[_messages.ModelMessage]) -> list[_messages.ToolCallPart]:
    """The tool calls made since the words that started this turn."""
    calls: list[_messages.ToolCallPart] = []
    for message in reversed(messages):
        if isinstance(message, _messages.ModelResponse):
            calls += message.tool_calls
        elif isinstance(message, _messages.ModelRequest) and _user_text(message):
            break
    return calls


def _newest_file(prompt: str) -> str:
    """The handle of the first file of the newest message that has one ("" when none has)."""
    for line in reversed(prompt.splitlines()):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        files = row.get("files") if isinstance(row, dict) else None
        if isinstance(files, list) and files and isinstance(files[0], dict):
            return str(files[0].get("file") or "")
    return ""


def _fetched_path(messages: list[_messages.ModelMessage]) -> str:
    """Where this turn's ``channel_fetch_file`` put the file ("" before it ran or when it failed)."""
    for message in reversed(messages):
        if not isinstance(message, _messages.ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, _messages.ToolReturnPart) and part.tool_name == "channel_fetch_file":
                result = part.content
                if isinstance(result, str):
                    try:
                        result = json.loads(result)
                    except ValueError:
                        return ""
                return str(result.get("path") or "") if isinstance(result, dict) else ""
        if _user_text(message):
            break
    return ""


def _use(
    tool: str, args: dict[str, object], messages: list[_messages.ModelMessage], info: AgentInfo
) -> list[_messages.ToolCallPart] | None:
    """``tool`` called when it is offered, else one ``tool_search`` for it; None when that search
    found nothing to call."""
    if tool in {t.name for t in info.function_tools}:
        return [_messages.ToolCallPart(tool, args)]
    query = tool.removeprefix("channel_").replace("_", " ")
    searched = any(
        c.tool_name == "tool_search" and c.args_as_dict().get("query") == query for c in _turn_calls(messages)
    )
    return None if searched else [_messages.ToolCallPart("tool_search", {"query": query, "limit": 1})]


def _file_calls(
    messages: list[_messages.ModelMessage], info: AgentInfo
) -> list[_messages.ToolCallPart] | None:
    """Sent a file: fetch it, then attach it back (each found with tool_search first)."""
    handle = _newest_file(_turn_prompt(messages))
    done = {c.tool_name for c in _turn_calls(messages)}
    if not handle or "channel_attach" in done:
        return None
    if "channel_fetch_file" not in done:
        return _use("channel_fetch_file", {"file": handle}, messages, info)
    path = _fetched_path(messages)
    if not path:
        return None
    comment = "Your file, back: the demo fetched it and attached it."
    args: dict[str, object] = {"path": path, "comment": comment}
    return _use("channel_attach", args, messages, info)


def _did(messages: list[_messages.ModelMessage]) -> str:
    """What this turn's tools did, in words, from their results."""
    last = messages[-1] if messages else None
    done = []
    for part in last.parts if isinstance(last, _messages.ModelRequest) else []:
        if not isinstance(part, _messages.ToolReturnPart):
            continue
        result = part.content
        if isinstance(result, str):
            try:
                result = json.loads(result)
            except ValueError:
                pass
        failed = isinstance(result, dict) and "error" in result
        if part.tool_name == "channel_react":
            done.append("could not react" if failed else "reacted 👀 to your message")
        elif part.tool_name == "channel_read":
            rows = result.get("messages") if isinstance(result, dict) else None
            count = len(rows) if isinstance(rows, list) else 0
            plural = "message" if count == 1 else "messages"
            done.append("could not read the thread" if failed else f"read the thread ({count} {plural})")
        elif part.tool_name == "channel_follow_up":
            at = result.get("at") if isinstance(result, dict) else None
            done.append(
                "could not schedule a follow-up"
                if failed
                else f"scheduled a follow-up for {at} (fast-forward the demo clock to see it fire)"
            )
        elif part.tool_name == "channel_attach":
            done.append("could not attach the file" if failed else "fetched your file and attached it back")
    return " and ".join(done)


def _text(messages: list[_messages.ModelMessage]) -> str:
    prompt = _turn_prompt(messages)
    if not prompt:
        return ""
    did = _did(messages)
    steps = f"With its tools it {did}.\n\n" if did else ""
    return f"{LABEL}\n\n{steps}This is what the agent was sent:\n\n{_preformatted(prompt)}"


def _preformatted(text: str) -> str:
    """``text`` as a fenced code block, shown exactly as sent (a fence longer than any run of
    backticks inside it; no Markdown inside)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    lines = "\n".join(line.rstrip("\r") for line in text.splitlines())
    return f"{fence}\n{lines}\n{fence}"


def _parts(messages: list[_messages.ModelMessage], info: AgentInfo) -> list[_messages.ToolCallPart] | None:
    """The tool calls that open a turn, or None when it is time to answer."""
    prompt = _prompt(messages)
    if not prompt:
        later = _follow_up_calls(messages, info) or _file_calls(messages, info)
        return later or _ask_calls(messages, info) or None
    return _calls(prompt, info) or _follow_up_calls(messages, info)


async def _answer(messages: list[_messages.ModelMessage], info: AgentInfo) -> _messages.ModelResponse:
    calls = _parts(messages, info)
    if calls:
        return _messages.ModelResponse(parts=list(calls))
    return _messages.ModelResponse(parts=[_messages.TextPart(_text(messages))])


async def _stream(
    messages: list[_messages.ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    calls = _parts(messages, info)
    if calls:
        for index, call in enumerate(calls):
            yield {index: DeltaToolCall(name=call.tool_name, json_args=call.args_as_json_str())}
        return
    # A few words at a time with a pause, as a model writes: the page shows the answer growing.
    for index, piece in enumerate(re.findall(r"\S+\s*|\s+", _text(messages)) or [""]):
        if index and index % 3 == 0:
            await asyncio.sleep(0.12)
        yield piece


def demo_model() -> FunctionModel:
    return FunctionModel(_answer, stream_function=_stream, model_name="demo-echo")


__all__ = ["EXAMPLES", "LABEL", "demo_model"]
