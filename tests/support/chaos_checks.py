"""The fault schedule's checker: what must hold once every fault is healed, each a named check.

It reads the emulator's final state (the thread as a person sees it), the store (``StoreState``) and
the instances' JSON logs. Each check returns the problems it found, one line each; none is clean.

- ``one_answer_each``: every answer the person asked for (``chaos_workload``'s stages) is in the
  thread exactly once (one answer may span two messages: a stream cut off, the rest posted after);
- ``no_partial_message``: no message is still streaming, no temporary reply ("working on it") stands,
  and every answer shows all of its text;
- ``no_apology``: no apology stands in a thread (the model of the workload always answers);
- ``cards_decided_once``: a conversation that asked has one card, decided, its buttons gone;
- ``no_orphan_asks``: every ask in the store has its card and is decided;
- ``follow_ups_fired_once``: the follow-up was scheduled once and fired once;
- ``runs_never_overlap``: no two runs of one conversation were under way at once (from the logs:
  ``run started`` to ``run finished``, or to the kill of the process that ran it);
- ``inbox_empty``: no inbox item pending, no journal entry open, no run left open.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from threadbound_emulator import FakeSlack

from .chaos_workload import Conversation, marker

CHECKS = (
    "one_answer_each",
    "no_partial_message",
    "no_apology",
    "cards_decided_once",
    "no_orphan_asks",
    "follow_ups_fired_once",
    "runs_never_overlap",
    "inbox_empty",
)
#: How every apology the app posts begins (``app.runs.outcome``).
APOLOGY = "Sorry, I "
TEMPORARY = ("working on it", "Let me look")


@dataclass
class StoreState:
    #: thread_ts → task_id, for every conversation.
    tasks: dict[str, str]
    open_runs: set[str]
    #: task_id → inbox items not yet consumed.
    inbox: dict[str, int]
    open_effects: list[dict[str, Any]]
    asks: list[dict[str, Any]]
    follow_ups: list[dict[str, Any]]


@dataclass
class Outcome:
    #: Check name → its problems (empty: clean).
    checks: dict[str, list[str]]
    notes: list[str] = field(default_factory=list)
    llm_requests: int = 0

    @property
    def failed(self) -> dict[str, list[str]]:
        return {name: problems for name, problems in self.checks.items() if problems}

    def report(self) -> str:
        lines = [f"  {name}: {'ok' if not problems else 'FAILED'}" for name, problems in self.checks.items()]
        for name, problems in self.failed.items():
            lines += [f"    {name}: {problem}" for problem in problems]
        return "\n".join(lines)


def shown(message: dict[str, Any]) -> str:
    """What a reader sees of a bot message: its markdown blocks, else its text."""
    blocks = [str(b.get("text", "")) for b in message.get("blocks") or [] if b.get("type") == "markdown"]
    return "".join(blocks) if blocks else str(message.get("text", ""))


def check(
    conversations: Sequence[Conversation],
    slack: FakeSlack,
    state: StoreState,
    logs: Sequence[tuple[Path, float | None]],
) -> Outcome:
    roots = {_root(slack, c): c for c in conversations}
    return Outcome(
        {
            "one_answer_each": _one_answer_each(roots, slack),
            "no_partial_message": _no_partial(roots, slack),
            "no_apology": [
                f"{_who(roots, m)}: {shown(m)[:80]!r}"
                for m in slack.bot_messages("C1")
                if APOLOGY in shown(m)
            ],
            "cards_decided_once": _cards(roots, slack, state),
            "no_orphan_asks": [
                f"{_task_key(roots, state, a['task_id'])}: ask {a['ask_id']} ({a['kind']})"
                f" card_ts={a['card_ts']!r} decision={a['decision']!r}"
                for a in state.asks
                if not a["card_ts"] or a["decision"] is None
            ],
            "follow_ups_fired_once": _follow_ups(roots, state),
            "runs_never_overlap": _overlaps(roots, state, logs),
            "inbox_empty": _inbox(roots, state),
        }
    )


def _root(slack: FakeSlack, conversation: Conversation) -> str:
    for message in slack.messages("C1"):
        if message.get("text") == conversation.mention:
            return str(message["ts"])
    return ""


def _who(roots: dict[str, Conversation], message: dict[str, Any]) -> str:
    conversation = roots.get(str(message.get("thread_ts") or message.get("ts")))
    return conversation.key if conversation else f"ts {message.get('ts')}"


def _task_key(roots: dict[str, Conversation], state: StoreState, task_id: str) -> str:
    root = next((r for r, t in state.tasks.items() if t == task_id), "")
    return roots[root].key if root in roots else task_id


def _thread(slack: FakeSlack, root: str) -> list[dict[str, Any]]:
    return [m for m in slack.bot_messages("C1") if m.get("thread_ts") == root]


def _one_answer_each(roots: dict[str, Conversation], slack: FakeSlack) -> list[str]:
    problems = []
    for root, c in roots.items():
        if not root:
            problems.append(f"{c.key}: the person's message was never posted")
            continue
        texts = [shown(m) for m in _thread(slack, root)]
        for stage in c.stages():
            found = len(re.findall(re.escape(_squash(marker(c.key, stage))) + r"[.:]", _joined(texts)))
            if found != 1:
                problems.append(f"{c.key} ({c.kind}): {found} answers {stage!r}: {[t[:60] for t in texts]}")
    return problems


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _joined(texts: list[str]) -> str:
    """A thread's bot messages as one text without whitespace: an answer streamed into one message and
    finished in the next (a stream cut off, a run resumed) reads whole, as a person reads it."""
    return "".join(_squash(t) for t in texts)


def _no_partial(roots: dict[str, Conversation], slack: FakeSlack) -> list[str]:
    problems = []
    for (channel, ts), stream in slack.streams.items():
        if stream.state == "streaming" and slack.find(channel, ts) is not None:
            problems.append(f"ts {ts}: still streaming, showing {stream.text[:60]!r}")
    for message in slack.bot_messages("C1"):
        text = shown(message)
        if any(t in text for t in TEMPORARY):
            problems.append(f"{_who(roots, message)}: a temporary message stands: {text[:60]!r}")
    for root, c in roots.items():
        texts = [shown(m) for m in _thread(slack, root)]
        for stage in c.stages():
            markers = len(re.findall(re.escape(_squash(marker(c.key, stage))) + r"[.:]", _joined(texts)))
            whole = _joined(texts).count(_squash(c.answer(stage)))
            if whole < markers:
                shown_texts = [t[-50:] for t in texts if marker(c.key, stage).split()[-1] in t]
                problems.append(f"{c.key}: the answer {stage!r} is not whole: {shown_texts}")
    return problems


def _cards(roots: dict[str, Conversation], slack: FakeSlack, state: StoreState) -> list[str]:
    problems = []
    for root, c in roots.items():
        if c.kind not in ("ask", "approval"):
            continue
        needle = f"Which one for {c.key}?" if c.kind == "ask" else f"deploy {c.key}"
        cards = [m for m in _thread(slack, root) if needle in json.dumps(m)]
        live = [m for m in cards if any(b.get("type") == "actions" for b in m.get("blocks") or [])]
        asks = [a for a in state.asks if a["task_id"] == state.tasks.get(root)]
        decided = [a for a in asks if a["decision"] is not None]
        if len(cards) != 1 or live or len(asks) != 1 or len(decided) != 1:
            problems.append(
                f"{c.key} ({c.kind}): {len(cards)} cards in the thread, {len(live)} still with buttons;"
                f" {len(asks)} asks in the store, {len(decided)} decided"
                f" ({[(a['ask_id'], a['card_ts'], a['decision']) for a in asks]})"
            )
    return problems


def _follow_ups(roots: dict[str, Conversation], state: StoreState) -> list[str]:
    problems = []
    for root, c in roots.items():
        if c.kind != "follow_up":
            continue
        rows = [f for f in state.follow_ups if f["task_id"] == state.tasks.get(root)]
        if len(rows) != 1 or rows[0]["state"] != "fired":
            problems.append(f"{c.key}: follow-ups {[(f['follow_up'], f['state']) for f in rows]}")
    return problems


def _inbox(roots: dict[str, Conversation], state: StoreState) -> list[str]:
    problems = []
    for task_id in state.open_runs:
        problems.append(f"{_task_key(roots, state, task_id)}: its run is left open")
    for task_id, n in state.inbox.items():
        if n:
            problems.append(f"{_task_key(roots, state, task_id)}: {n} inbox items pending")
    for effect in state.open_effects:
        problems.append(
            f"{_task_key(roots, state, effect['task_id'])}: a journal entry open: {effect['tool']}"
        )
    return problems


def _when(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def runs_of(logs: Sequence[tuple[Path, float | None]]) -> list[tuple[str, str, float, float, str]]:
    """Every run the logs show: ``(task, run, started, ended, log name)``; a run cut off by a kill
    ends at the kill, one still under way when the log ends at its last line."""
    runs = []
    for path, killed in logs:
        started: dict[str, tuple[str, float]] = {}
        last = 0.0
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict) or "time" not in entry:
                continue
            last = _when(entry["time"])
            if entry.get("message") == "run started":
                started[entry.get("run", "")] = (entry.get("task", ""), last)
            elif entry.get("message") == "run finished" and entry.get("run") in started:
                task, began = started.pop(entry["run"])
                runs.append((task, entry["run"], began, last, path.name))
        end = killed if killed is not None else last
        runs += [(task, run, began, end, path.name) for run, (task, began) in started.items()]
    return runs


def _overlaps(
    roots: dict[str, Conversation], state: StoreState, logs: Sequence[tuple[Path, float | None]]
) -> list[str]:
    problems = []
    by_task: dict[str, list[tuple[str, str, float, float, str]]] = {}
    for run in runs_of(logs):
        by_task.setdefault(run[0], []).append(run)
    for task, runs in by_task.items():
        runs.sort(key=lambda r: r[2])
        longest = runs[0]
        for later in runs[1:]:
            if later[2] < longest[3]:
                problems.append(
                    f"{_task_key(roots, state, task)}: run {later[1]} ({later[4]}) began"
                    f" {longest[3] - later[2]:.2f} s before run {longest[1]} ({longest[4]}) ended"
                )
            if later[3] > longest[3]:
                longest = later
    return problems
