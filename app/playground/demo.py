"""The demo model (``--demo``): an echo, not an LLM, so the playground runs with no key at all.

Each turn it first acts as an agent would, with the channel tools it is offered: it reacts 👀 to
the newest message (``channel_react``) and reads the thread (``channel_read``), so the page shows
the steps and the reaction. Then it answers with a labelled quote of what it was sent (the prompt
exactly as the model sees it) and what its tools did, as final text streamed a few words at a time
like a real model's, so the answer grows in the thread and gets its feedback buttons. Asked to
"remind" or "follow up", it finds ``channel_follow_up`` with ``tool_search`` and schedules one 20
minutes ahead (the page's fast-forward fires it). Asked "ask me" it finds ``channel_ask`` and asks
a question with two option buttons; asked "request approval" it posts an Approve/Deny card
(``channel_request_approval``); either ends its turn and the click resumes it with the answer. It
shows the wiring, not intelligence.
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
    return " and ".join(done)


def _text(messages: list[_messages.ModelMessage]) -> str:
    prompt = _turn_prompt(messages)
    if not prompt:
        return ""
    quoted = "\n".join(f"> {line}" for line in prompt.splitlines())
    did = _did(messages)
    steps = f"With its tools it {did}.\n\n" if did else ""
    return f"{LABEL}\n\n{steps}This is what the agent was sent:\n\n{quoted}"


def _parts(messages: list[_messages.ModelMessage], info: AgentInfo) -> list[_messages.ToolCallPart] | None:
    """The tool calls that open a turn, or None when it is time to answer."""
    prompt = _prompt(messages)
    if not prompt:
        return _follow_up_calls(messages, info) or _ask_calls(messages, info) or None
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


__all__ = ["LABEL", "demo_model"]
