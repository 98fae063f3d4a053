"""A channel session: the channel tools bound to one task's conversation.

This is where the contract's guarantees live, independent of the provider:
arguments are validated by the tool's own model, handles are resolved for this
task only, edit/retract check authorship, writes go through the effect journal,
and every failure becomes an ``{"error": ...}`` result instead of an exception.

The deployment's tools come from ``channel.selection``, writes are journalled by
``channel.journal``, and the store is reached only through ``channel.store.SessionStore``.
A host builds one session per run::

    session = ChannelSession(adapter=..., store=..., task=task, origin=origin, tools=selection, task_dir=...)
    specs = session.active_specs()          # what to offer the model now
    result = await session.call(name, args)  # never raises
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from storage.base import EffectRecord, StoreError, TaskRecord

from . import tool_search
from .contract import ChannelAdapter, FileMeta, MessageView, Origin, OriginInfo, Posted, Step
from .errors import ChannelError, bounded
from .handles import HandleRegistry
from .journal import EffectJournal, WriteGuard, reconcile
from .markdown import split_markdown, strip_mass_mentions
from .selection import HostTool, ToolSelection
from .store import SessionStore
from .streaming import FLUSH_INTERVAL, AnswerStream
from .tools import (
    CATALOG,
    MCP_SEARCH,
    SKILLS,
    TOOL_SEARCH,
    AttachArgs,
    EditArgs,
    FetchFileArgs,
    PostDocumentArgs,
    ReactArgs,
    ReadArgs,
    ReplyArgs,
    RetractArgs,
    SkillsArgs,
    ToolSearchArgs,
    ToolSpec,
)

log = logging.getLogger(__name__)

Result = dict[str, Any]
_CURSOR = re.compile(r"^before_(\d{1,7})$")
#: The id of the tool call being handled (a streamed channel_reply is matched by it).
_CALL_ID: ContextVar[str] = ContextVar("channel_call_id", default="")
# Deferred tools named when tool_search finds nothing; MCP servers can bring hundreds.
_LISTED = 30


class ChannelSession:
    def __init__(
        self,
        *,
        adapter: ChannelAdapter,
        store: SessionStore,
        task: TaskRecord,
        origin: Origin,
        tools: ToolSelection,
        task_dir: Path,
        adopt_first_root: bool = False,
        clock: Callable[[], float] = time.time,
        guard: WriteGuard | None = None,
    ) -> None:
        """``guard`` is awaited before every write and may raise to stop it (see the journal)."""
        self.adapter = adapter
        self.store = store
        self.task = task
        self.origin = origin
        self.tools = tools
        self.task_dir = task_dir
        self.handles = HandleRegistry(store, task.task_id)
        self.journal = EffectJournal(store, task.task_id, clock, guard)
        selectable = {s.name for s in tools.deferred} | {t.name for t in tools.host_deferred}
        # In the order they were enabled (as stored): offered after the starting tools in that order,
        # so enabling one appends to the tool definitions and the cached prefix before it stays.
        self._enabled_order: list[str] = [t for t in task.enabled_tools if t in selectable]
        self.enabled: set[str] = set(self._enabled_order)
        #: Handles of every message the bot posted in this run.
        self.posted: list[str] = []
        #: Set once a channel_reply succeeded (or the host posted the final text).
        self.replied = False
        # The newest post of this run, where a usage footer goes: its ref, text and feedback key.
        self._last_post: tuple[str, str, str] | None = None
        #: Feedback buttons on each answer's last message report this key (the host sets it); "" for none.
        self.feedback = ""
        #: The answer being streamed, when the host turned streaming on (:meth:`stream_answers`).
        self.answer: AnswerStream | None = None
        self._streaming = False
        self._recipient: Mapping[str, Any] | None = None
        self._interval = FLUSH_INTERVAL
        # A `run` without --thread posts a new root; its later posts go into that root's thread.
        self._adopt_first_root = adopt_first_root
        self._conversation: list[MessageView] | None = None
        self._handlers: dict[str, Callable[[Any], Awaitable[Result]]] = {
            "channel_reply": self._reply,
            "channel_read": self._read,
            "channel_react": self._react,
            "channel_edit": self._edit,
            "channel_retract": self._retract,
            "channel_fetch_file": self._fetch_file,
            "channel_attach": self._attach,
            "channel_post_document": self._post_document,
            "tool_search": self._tool_search,
            "mcp_search": self._tool_search,
            "skills": self._skills,
        }

    # -- what the model is offered ------------------------------------------------
    @property
    def enabled_in_order(self) -> list[str]:
        """The tools ``tool_search`` enabled, oldest first (how they are stored and offered); any
        added to ``enabled`` directly come after them, by name."""
        ordered = [t for t in self._enabled_order if t in self.enabled]
        return ordered + sorted(self.enabled - set(ordered))

    def active_specs(self) -> list[ToolSpec]:
        """The channel tools (and tool_search, mcp_search, skills) to offer the model now: the
        starting ones in catalog order, then those tool_search enabled, in the order it did."""
        specs = [s for s in self.tools.channel_tools if s.starts == "active"]
        if self._searchable():
            specs.append(TOOL_SEARCH)
        if any(t.name not in self.enabled for t in self.tools.host_deferred):
            specs.append(MCP_SEARCH)  # the seed's name for tool_search, while MCP tools wait to be found
        if self.tools.skills:
            specs.append(SKILLS)
        deferred = {s.name: s for s in self.tools.channel_tools if s.starts != "active"}
        return specs + [deferred[n] for n in self.enabled_in_order if n in deferred]

    def active_host_tools(self) -> list[HostTool]:
        """The host's (MCP) tools to offer now: the eager ones, then those tool_search enabled in the
        order it did."""
        deferred = {t.name: t for t in self.tools.host_tools if t.starts != "active"}
        eager = [t for t in self.tools.host_tools if t.starts == "active"]
        return eager + [deferred[n] for n in self.enabled_in_order if n in deferred]

    def offered_names(self) -> list[str]:
        return [s.name for s in self.active_specs()] + [t.name for t in self.active_host_tools()]

    def offered(self, name: str) -> bool:
        return name in self.offered_names()

    def _searchable(self) -> list[ToolSpec | HostTool]:
        """Deferred tools tool_search can still enable, channel and host together."""
        deferred: list[ToolSpec | HostTool] = [*self.tools.deferred, *self.tools.host_deferred]
        return [t for t in deferred if t.name not in self.enabled]

    # -- streaming ----------------------------------------------------------------------
    def stream_answers(
        self, recipient: Mapping[str, Any] | None, *, interval: float = FLUSH_INTERVAL
    ) -> bool:
        """Stream answers from now on, when the adapter can stream here (a thread); ``recipient`` is the
        inbound message answered (as ``view`` takes it). Returns whether streaming is on."""
        self._streaming = self.adapter.features.stream and bool(self.origin.thread_ts)
        self._recipient = recipient
        self._interval = interval
        return self._streaming

    @property
    def streaming(self) -> bool:
        """Answers stream, and the current one (if any) has not fallen back to posts."""
        return self._streaming and not (self.answer is not None and self.answer.broken)

    def _answer_stream(self) -> AnswerStream:
        if self.answer is None:
            self.answer = AnswerStream(
                self, recipient=self._recipient, feedback=self.feedback, interval=self._interval
            )
        return self.answer

    def stream_text(self, source: str, text: str) -> None:
        """What ``source`` wrote so far: ``text:…`` a model response's text (shown until the session
        replied), ``call:<id>`` a channel_reply call's ``text`` argument."""
        if not self._streaming or (self.replied and not source.startswith("call:")):
            return
        if not text and self.answer is None:
            return
        self._answer_stream().text(source, text)

    def stream_step(self, step: Step) -> None:
        """A tool started or ended; shown in the answer being streamed (not after the reply)."""
        if not self._streaming or (self.replied and self.answer is None):
            return
        self._answer_stream().step(step)

    async def answer_with(self, markdown: str) -> Result:
        """The run's final text as the reply: the streamed answer finished with it, or posted."""
        answer, self.answer = self.answer, None
        if answer is not None:
            result = await answer.finish(markdown)
            self.replied = True
            await self._remember_streamed(markdown, result)
            return result
        return await self.post_markdown(markdown)

    def stop_streaming(self) -> None:
        """Stop feeding the answer being streamed (the run is over); writes nothing."""
        self._streaming = False
        if self.answer is not None:
            self.answer.cancel()

    async def drop_answer(self) -> None:
        """The run ended without the streamed text becoming an answer: remove what was shown."""
        answer, self.answer = self.answer, None
        if answer is not None:
            await answer.abandon()

    # -- calling ----------------------------------------------------------------------
    async def call(self, name: str, args: Any, *, call_id: str = "") -> Result:
        """Run one tool call; always returns a result (an error result on any refusal or failure).
        ``call_id`` is the model's id for the call (a streamed reply is matched by it)."""
        token = _CALL_ID.set(call_id)
        try:
            return await self._call(name, args)
        finally:
            _CALL_ID.reset(token)

    async def _call(self, name: str, args: Any) -> Result:
        spec = MCP_SEARCH if name == MCP_SEARCH.name else CATALOG.get(name)
        if spec is None or not self.offered(name):
            deferred = any(s.name == name for s in (*self.tools.deferred, *self.tools.host_deferred))
            hint = " Use tool_search to enable it." if deferred else ""
            return ChannelError("unsupported", f"There is no tool {name!r} available now.{hint}").as_result()
        try:
            parsed = spec.args.model_validate(args if args is not None else {})
        except ValidationError as exc:
            return _validation_error(exc).as_result()
        try:
            return await self._handlers[name](parsed)
        except ChannelError as exc:
            return exc.as_result()
        except StoreError:
            # Our storage, not Slack: say so, or the model would blame (and retry against) Slack.
            log.exception("store failure in tool %s", name)
            return ChannelError(
                "tool_failed", "Internal storage error; the action may not have happened."
            ).as_result()

    # -- replies ------------------------------------------------
    async def _reply(self, args: ReplyArgs) -> Result:
        answer = self.answer
        call_id = _CALL_ID.get()
        if answer is not None and call_id and f"call:{call_id}" in answer.sources:
            self.answer = None
            result = await answer.finish(args.text)
            self.replied = True
            await self._remember_streamed(args.text, result)
            return result
        return await self.post_markdown(args.text)

    async def post_markdown(self, markdown: str, *, feedback: bool = True) -> Result:
        """Post Markdown as one or more consecutive messages; the host uses this for fallbacks too
        (``feedback=False``: no feedback buttons, e.g. on an apology)."""
        text = strip_mass_mentions(markdown)
        parts = split_markdown(text, self.adapter.max_post_chars)
        if not parts:
            raise ChannelError("invalid_arguments", "text is blank; write the reply in text.")
        handles: list[str] = []
        first_permalink: str | None = None
        bridge_error: str | None = None
        for index, part in enumerate(parts):
            effect_id = await self.journal.open(
                "channel_reply",
                {"channel": self.origin.channel, "thread_ts": self.origin.thread_ts, "part": index},
            )
            last = index == len(parts) - 1
            try:
                posted = await self.post_once(
                    part, effect_id, feedback=self.feedback if feedback and last else ""
                )
            except ChannelError as exc:
                await self.journal.close(effect_id, exc.as_result())
                if handles:
                    exc.message = bounded(
                        f"{exc.message} (parts 1-{index} were posted: {', '.join(handles)})"
                    )
                raise
            try:
                handle = await self.record_post(posted)
                await self.journal.close(effect_id, {"message": handle})
            except StoreError as exc:
                # The provider has the post; never post again. Tell the model what we know (its
                # permalink is in the result; the ref is the adapter's and never shown).
                log.exception("recording a post failed after the provider accepted it")
                handle = "unrecorded"
                bridge_error = bounded(f"posted, but recording it failed: {exc}")
            handles.append(handle)
            self._last_post = (posted.ref, part, self.feedback if feedback and last else "")
            if first_permalink is None:
                first_permalink = posted.permalink
        self.replied = True
        result: Result = {"message": handles[0], "permalink": first_permalink}
        if len(handles) > 1:
            result["parts"] = handles
        if bridge_error:
            result["bridge_error"] = bridge_error
        return result

    async def add_footer(self, footer: str) -> None:
        """Show ``footer`` (e.g. the run's usage) under this run's newest post, keeping its text and
        feedback buttons; nothing when it posted nothing. A failure is logged: the answer is there."""
        if self._last_post is None:
            return
        ref, markdown, feedback = self._last_post
        await self.journal.check()
        try:
            await self.adapter.edit(ref, markdown, feedback=feedback, footer=footer)
        except ChannelError as exc:
            log.warning("could not add the footer to a post: %s", exc.message)

    async def _remember_streamed(self, markdown: str, result: Result) -> None:
        """A streamed answer ended as ``result``: its last message is where a footer goes."""
        handles = result.get("parts") or [result.get("message")]
        parts = split_markdown(strip_mass_mentions(markdown), self.adapter.max_post_chars)
        if not parts or not isinstance(handles[-1], str) or not handles[-1].startswith("msg_"):
            return
        try:
            record = await self.handles.resolve(handles[-1], "msg")
        except (ChannelError, StoreError):
            return
        self._last_post = (record.ref, parts[-1], self.feedback)

    async def post_once(self, markdown: str, effect_id: str, *, feedback: str = "") -> Posted:
        """Post, never retrying; when the connection broke mid-request, look for the post instead."""
        try:
            return await self.adapter.post(self.origin, markdown, effect_id=effect_id, feedback=feedback)
        except ChannelError as exc:
            if exc.provider_code != "transport":
                raise
            try:
                found = await self.adapter.find_posted(self.origin, effect_id)
            except ChannelError:
                found = []
            if not found:
                raise
            return found[0]

    async def record_post(self, posted: Posted) -> str:
        """Mint the handle of a message the bot just posted (and route a new root to this task)."""
        handle = await self.handles.mint("msg", posted.ref, authored=True)
        self.posted.append(handle)
        if posted.new_root:
            await self.store.record_root(
                channel=self.origin.channel, ts=posted.new_root, task_id=self.task.task_id
            )
            if self._adopt_first_root and not self.origin.thread_ts:
                await self.store.set_task_thread(self.task.task_id, posted.new_root)
                self.origin = Origin(self.origin.channel, posted.new_root)
                self._adopt_first_root = False
        return handle

    def forget_post(self, handle: str) -> None:
        """A message posted in this run was removed again (a streamed text that was no answer)."""
        if handle in self.posted:
            self.posted.remove(handle)

    async def reconcile(self, effects: Sequence[EffectRecord]) -> list[str]:
        """Settle effects a crashed run left open (see :func:`channel.journal.reconcile`)."""
        return await reconcile(self.journal, self.adapter, self.origin, effects, self.record_post)

    # -- what the host needs about the conversation ----------------------------------------
    async def describe(self) -> OriginInfo:
        """Names and permalink of this conversation, for the run's instructions."""
        return await self.adapter.describe(self.origin)

    async def inbound_row(self, raw: Mapping[str, Any]) -> Result:
        """An inbound message (as the ingress stored it) as the model sees it, like a channel_read row."""
        return await self.row(await self.adapter.view(raw))

    # -- reading ----------------------------------------------------------------------
    async def conversation(self) -> list[MessageView]:
        """The conversation, fetched once per session and served from memory afterwards."""
        if self._conversation is None:
            self._conversation = await self.adapter.read(self.origin)
        return self._conversation

    async def _read(self, args: ReadArgs) -> Result:
        messages = await self.conversation()
        end = len(messages)
        if args.cursor is not None:
            match = _CURSOR.match(args.cursor)
            if match is None or not 0 < int(match.group(1)) <= len(messages):
                raise ChannelError(
                    "invalid_arguments", "cursor must be a next_cursor value from channel_read."
                )
            end = int(match.group(1))
        start = max(0, end - args.limit)
        rows = [await self.row(m) for m in messages[start:end]]
        return {"messages": rows, "next_cursor": f"before_{start}" if start > 0 else None}

    async def row(self, view: MessageView) -> Result:
        """A message as the model sees it, with handles minted for it and its files."""
        row: Result = {
            "message": await self.handles.mint("msg", view.ref, authored=view.author.is_you),
            "author": {
                "display_name": view.author.display_name,
                "is_bot": view.author.is_bot,
                "is_you": view.author.is_you,
            },
            "text": view.text,
            "time": view.time,
            "files": [await self._file_row(f) for f in view.files],
        }
        if view.reactions:
            row["reactions"] = dict(view.reactions)
        return row

    async def _file_row(self, meta: FileMeta, *, authored: bool = False) -> Result:
        if meta.unavailable:
            # Listed so the model knows it is there, but with no handle: nothing could fetch it.
            return {"name": meta.name, "unavailable": meta.unavailable}
        data = json.dumps({"name": meta.name, "media_type": meta.media_type, "size": meta.size, **meta.data})
        handle = await self.handles.mint("file", meta.ref, authored=authored, data=data)
        return {"file": handle, "name": meta.name, "media_type": meta.media_type, "size": meta.size}

    # -- reactions, edits, retractions ----------------------------------------------------
    async def _react(self, args: ReactArgs) -> Result:
        record = await self.handles.resolve(args.message, "msg")
        emoji = args.emoji.strip(":")
        add = args.action == "add"

        async def act() -> Result:
            try:
                await self.adapter.react(record.ref, emoji, add=add)
            except ChannelError as exc:
                if exc.provider_code == "already_reacted":
                    return {"ok": True, "note": f"you had already reacted with :{emoji}:"}
                if exc.provider_code == "no_reaction":
                    return {"ok": True, "note": f"there was no :{emoji}: reaction of yours to remove"}
                raise
            return {"ok": True}

        return await self.journal.write("channel_react", {"ref": record.ref, "emoji": emoji, "add": add}, act)

    async def _own(self, handle: str) -> str:
        record = await self.handles.resolve(handle, "msg")
        if not record.authored:
            raise ChannelError(
                "not_authored", f"{handle} was not posted by you; you can only change your own messages."
            )
        return record.ref

    async def _edit(self, args: EditArgs) -> Result:
        ref = await self._own(args.message)
        text = strip_mass_mentions(args.text)
        if len(text) > self.adapter.max_post_chars:
            raise ChannelError(
                "invalid_arguments",
                f"text is {len(text)} characters; one message holds {self.adapter.max_post_chars}. "
                "Edit with a shorter text, or reply with the rest.",
            )

        async def act() -> Result:
            await self.adapter.edit(ref, text)
            return {"message": args.message}

        return await self.journal.write("channel_edit", {"ref": ref, "text": text}, act)

    async def _retract(self, args: RetractArgs) -> Result:
        ref = await self._own(args.message)

        async def act() -> Result:
            await self.adapter.retract(ref)
            return {"ok": True}

        return await self.journal.write("channel_retract", {"ref": ref}, act)

    # -- files ----------------------------------------------------------------------------
    async def _fetch_file(self, args: FetchFileArgs) -> Result:
        record = await self.handles.resolve(args.file, "file")
        data = json.loads(record.data or "{}")
        meta = FileMeta(
            ref=record.ref,
            name=str(data.get("name") or "file"),
            media_type=str(data.get("media_type") or "application/octet-stream"),
            size=int(data.get("size") or 0),
            data={k: v for k, v in data.items() if k not in ("name", "media_type", "size")},
        )
        if not meta.data.get("url"):
            meta = await self.adapter.file_info(record.ref)
        fetched = await self.adapter.fetch_file(meta, self.task_dir, variant=args.variant)
        return {
            "path": str(fetched.path.relative_to(self.task_dir)),
            "media_type": fetched.media_type,
            "size": fetched.size,
            "sha256": fetched.sha256,
        }

    def _task_path(self, raw: str) -> Path:
        root = self.task_dir.resolve()
        candidate = Path(raw)
        path = (candidate if candidate.is_absolute() else root / candidate).resolve()
        if not path.is_relative_to(root):
            raise ChannelError("file_refused", "path must name a file inside your task directory.")
        if not path.is_file():
            raise ChannelError("not_found", f"no file at {raw!r} in your task directory.")
        return path

    async def _attach(self, args: AttachArgs) -> Result:
        path = self._task_path(args.path)
        comment = strip_mass_mentions(args.comment) if args.comment else None

        async def act() -> Result:
            uploaded = await self.adapter.attach(self.origin, path, title=args.title, comment=comment)
            row = await self._file_row(uploaded.file, authored=True)
            result: Result = {"file": row["file"]}
            if uploaded.message_ref:
                result["message"] = await self.handles.mint("msg", uploaded.message_ref, authored=True)
            return result

        return await self.journal.write(
            "channel_attach", {"path": str(path.relative_to(self.task_dir.resolve()))}, act
        )

    async def _post_document(self, args: PostDocumentArgs) -> Result:
        markdown = strip_mass_mentions(args.markdown)

        async def act() -> Result:
            doc = await self.adapter.post_document(self.origin, args.title, markdown)
            handle = await self.handles.mint("file", doc.ref, authored=True)
            return {"document": handle, "permalink": doc.permalink}

        return await self.journal.write("channel_post_document", {"title": args.title}, act)

    # -- discovery -----------------------------------------------------------------------
    async def _tool_search(self, args: ToolSearchArgs) -> Result:
        candidates = self._searchable()
        hits = tool_search.rank(candidates, args.query, args.limit)
        if not hits:
            listed = ", ".join(f"{s.name} ({s.label})" for s in candidates[:_LISTED]) or "none"
            if len(candidates) > _LISTED:
                listed += f", and {len(candidates) - _LISTED} more"
            return {"enabled": [], "message": "No tool matched. Tools you can still enable: " + listed}
        for hit in hits:
            if hit.name not in self.enabled:
                self.enabled.add(hit.name)
                self._enabled_order.append(hit.name)
        await self.store.set_enabled_tools(self.task.task_id, self.enabled_in_order)
        return {
            # Host tools' descriptions are the server's own words, of any length.
            "enabled": [{"name": s.name, "description": bounded(s.description, 400)} for s in hits],
            "message": "Enabled from your next step on: " + ", ".join(s.name for s in hits),
        }

    async def _skills(self, args: SkillsArgs) -> Result:
        library = self.tools.skills
        if args.name:
            skill = library.get(args.name)
            if skill is not None:
                return {"name": skill.name, "markdown": skill.body}
            return {"message": f"No skill named {args.name!r}.", **library.index()}
        return library.index()


_HANDLE_FIELDS = {"message": "msg", "file": "file"}


def _validation_error(exc: ValidationError) -> ChannelError:
    # A raw Slack ts or file id in a handle field is a handle problem, and the model should hear so.
    for err in exc.errors():
        field_name = str(err["loc"][0]) if err["loc"] else ""
        if field_name in _HANDLE_FIELDS and err["type"] == "string_pattern_mismatch":
            kind = _HANDLE_FIELDS[field_name]
            return ChannelError(
                "invalid_handle",
                f"{field_name} must be a {kind}_… handle from channel_read or your prompt; "
                "raw Slack ids and timestamps are not accepted.",
            )
    return ChannelError("invalid_arguments", _describe(exc))


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown argument {loc!r}")
        else:
            parts.append(f"{loc}: {err['msg']}")
    return "invalid arguments: " + "; ".join(parts)
