"""The channel tool catalog: one :class:`ToolSpec` per tool, with its argument model.

A spec is all there is to a tool besides the adapter method it calls: its name, description and
arguments, the handler that runs it, the status and step title people see while it works, its
journal policy and the feature it needs. The session dispatches by it, ``app.runs.progress`` and
``app.runs.streaming`` show its texts, the journal settles its interrupted writes by it, and
``channel.slack.scopes`` maps its feature to scopes.

One pydantic model per tool both produces the JSON schema the model sees and
validates the call, so the two can never disagree. Every model forbids extra
fields (``additionalProperties: false``) and bounds every input. No model has a
field that addresses a channel, thread, user or workspace: the session binds
all of that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .journal import NO_WRITES, WRITES_OUTSIDE, JournalPolicy, journalled, redo, settle_post, settle_unknown

if TYPE_CHECKING:
    from .session import ChannelSession

# Handles are minted by the host: a prefix and 22 URL-safe characters.
MSG_HANDLE = r"^msg_[A-Za-z0-9_-]{8,40}$"
FILE_HANDLE = r"^file_[A-Za-z0-9_-]{8,40}$"
FOLLOW_UP_HANDLE = r"^fu_[A-Za-z0-9_-]{8,40}$"
# Slack emoji names: lower-case letters, digits, _ + - ' and an optional skin tone; colons allowed around.
EMOJI = r"^:?[a-z0-9_+'\-]{1,64}(::skin-tone-[2-6])?:?$"
MAX_TEXT = 40_000
APPROVAL_HANDLE = r"^ap_[A-Za-z0-9_-]{8,40}$"


class ToolArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False, frozen=True)


class ReplyArgs(ToolArgs):
    text: str = Field(
        min_length=1, max_length=MAX_TEXT, description="The reply, in Markdown. Long replies are split."
    )


class ReadArgs(ToolArgs):
    limit: int = Field(default=15, ge=1, le=15, description="How many messages per page (1-15).")
    cursor: str | None = Field(
        default=None,
        max_length=64,
        description="next_cursor from the previous channel_read call, to page to older messages.",
    )


class ReactArgs(ToolArgs):
    message: str = Field(pattern=MSG_HANDLE, description="Handle of the message (msg_...).")
    emoji: str = Field(
        pattern=EMOJI, max_length=80, description="Emoji name, e.g. thumbsup or white_check_mark."
    )
    action: Literal["add", "remove"] = Field(default="add", description="Add or remove the reaction.")


class EditArgs(ToolArgs):
    message: str = Field(pattern=MSG_HANDLE, description="Handle of a message you posted (msg_...).")
    text: str = Field(min_length=1, max_length=MAX_TEXT, description="The new text, in Markdown.")


class RetractArgs(ToolArgs):
    message: str = Field(pattern=MSG_HANDLE, description="Handle of a message you posted (msg_...).")


class FetchFileArgs(ToolArgs):
    file: str = Field(
        pattern=FILE_HANDLE, description="Handle of a file (file_...) from channel_read or the prompt."
    )
    variant: Literal["original", "video_low"] | None = Field(
        default=None, description="video_low downloads a smaller MP4 rendition when one exists."
    )


class AttachArgs(ToolArgs):
    path: str = Field(
        min_length=1,
        max_length=512,
        description="Path of a file in your task directory (as channel_fetch_file returned).",
    )
    title: str | None = Field(default=None, max_length=250, description="Title shown for the file.")
    comment: str | None = Field(default=None, max_length=4000, description="Markdown comment posted with it.")


class PostDocumentArgs(ToolArgs):
    title: str = Field(min_length=1, max_length=250, description="Document title.")
    markdown: str = Field(min_length=1, max_length=100_000, description="Document body, in Markdown.")


class FollowUpArgs(ToolArgs):
    at: str | None = Field(
        default=None,
        max_length=40,
        description=(
            "When, as an ISO 8601 time with its UTC offset (2026-03-02T09:00:00+01:00); use the person's "
            "time zone from your instructions. Give at or after, not both."
        ),
    )
    after: str | None = Field(
        default=None,
        pattern=r"^(\d{1,3}d)?(\d{1,4}h)?(\d{1,6}m)?$",
        max_length=20,
        description="How long from now: minutes, hours or days, e.g. 20m, 3h, 2d or 1h30m.",
    )
    note: str = Field(
        min_length=1, max_length=1000, description="What you should do then (shown to you when it fires)."
    )

    @model_validator(mode="after")
    def _one_time(self) -> FollowUpArgs:
        if (self.at is None) == (self.after in (None, "")):
            raise ValueError("give exactly one of at (an ISO 8601 time with offset) or after (e.g. 20m)")
        return self


class CancelFollowUpArgs(ToolArgs):
    follow_up: str = Field(pattern=FOLLOW_UP_HANDLE, description="Handle of a pending follow-up (fu_...).")


class NoArgs(ToolArgs):
    pass


class ToolSearchArgs(ToolArgs):
    query: str = Field(min_length=1, max_length=200, description="What you want to do, in a few words.")
    limit: int = Field(default=3, ge=1, le=10, description="How many tools to enable at most (1-10).")


class SkillsArgs(ToolArgs):
    name: str | None = Field(
        default=None, max_length=100, description="A skill's name; omit it to list the skills."
    )


class AskArgs(ToolArgs):
    question: str = Field(min_length=1, max_length=2000, description="The question, in Markdown.")
    options: list[Annotated[str, Field(min_length=1, max_length=75)]] | None = Field(
        default=None,
        min_length=2,
        max_length=5,
        description="2-5 answer labels shown as buttons; omit for a free-text answer (the next message).",
    )
    only_requester: bool = Field(
        default=True,
        description="Only the person who asked you (and approvers) may answer; false: anyone here.",
    )


class RequestApprovalArgs(ToolArgs):
    action: str = Field(
        min_length=1, max_length=2000, description="What you intend to do and want allowed, in Markdown."
    )
    details: str | None = Field(default=None, max_length=2000, description="More detail, shown in full.")


class CheckApprovalArgs(ToolArgs):
    approval: str = Field(pattern=APPROVAL_HANDLE, description="The approval's handle (ap_...).")


class NoReplyArgs(ToolArgs):
    pass


class TitleArgs(ToolArgs):
    title: str = Field(
        min_length=1, max_length=60, description="A few words saying what this conversation is about."
    )


Starts = Literal["active", "deferred"]
#: Runs one call of a tool in the session it was made in, with its validated arguments.
Handler = Callable[["ChannelSession", Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """Everything about one tool, declared once: what the model is shown, what runs it, what people
    see while it works, how it meets the journal and what the adapter must support for it."""

    name: str
    #: A few words tool_search ranks by and lists.
    label: str
    description: str
    args: type[ToolArgs]
    #: Runs a call (the session part that does it, reached through the session).
    handler: Handler
    #: The thread's status while it works ("is reading the thread…"); None leaves the status as it is.
    status: str | None
    #: The step shown in a streamed answer while it works; None shows the tool's name.
    step_title: str | None
    #: What it writes and how an interrupted write of it is settled (``channel.journal``).
    journal: JournalPolicy
    #: The ``ChannelFeatures`` flag it needs; None for tools every adapter has.
    feature: str | None
    starts: Starts

    def schema(self) -> dict[str, Any]:
        return closed_schema(self.args)

    @property
    def short_name(self) -> str:
        return self.name.removeprefix("channel_")

    def parameter_text(self) -> str:
        return " ".join(f"{n} {f.description or ''}" for n, f in self.args.model_fields.items())


#: Schema keywords whose value is a mapping of names to schemas (a property may be called "title").
_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
#: Schema keywords whose value is data, not a schema: left as they are.
_DATA = frozenset({"default", "const", "enum", "examples"})


def closed_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema, with ``additionalProperties: false`` on every object in it and no
    ``title`` (pydantic's, a property's name again: tokens in every request to providers whose
    pydantic-ai profile does not drop them, and a walk for those whose does, on every request)."""
    schema = model.model_json_schema()

    def close(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("title", None)
            if node.get("type") == "object":
                node["additionalProperties"] = False
            for key, value in node.items():
                if key in _DATA:
                    continue
                if key in _NAMED_SCHEMAS and isinstance(value, dict):
                    for each in value.values():
                        close(each)
                else:
                    close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


CHANNEL_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="channel_reply",
        label="Reply",
        description=(
            "Post a reply in this conversation. This is the only way your answer reaches people. Returns "
            "the message handle and permalink."
        ),
        args=ReplyArgs,
        handler=lambda session, args: session.replies.reply(args),
        status=None,
        step_title=None,
        # A post carries its effect id: an interrupted one is looked for, never posted again.
        journal=journalled(settle_post),
        feature=None,
        starts="active",
    ),
    ToolSpec(
        name="channel_read",
        label="Read the conversation",
        description=(
            "Read messages of this conversation: the newest page first; pass next_cursor to page to older "
            "ones. Rows carry message and file handles."
        ),
        args=ReadArgs,
        handler=lambda session, args: session.reading.read(args),
        status="is reading the thread…",
        step_title="Reading the thread",
        journal=NO_WRITES,
        feature="read",
        starts="active",
    ),
    ToolSpec(
        name="channel_react",
        label="React",
        description="Add or remove an emoji reaction on a message of this conversation.",
        args=ReactArgs,
        handler=lambda session, args: session.replies.react(args),
        status="is reacting…",
        step_title="Reacting",
        journal=journalled(
            redo(lambda adapter, a: adapter.react(str(a["ref"]), str(a["emoji"]), add=bool(a["add"])))
        ),
        feature="react",
        starts="active",
    ),
    ToolSpec(
        name="channel_edit",
        label="Edit your message",
        description="Edit a message you posted in this conversation (replace its text).",
        args=EditArgs,
        handler=lambda session, args: session.replies.edit(args),
        status="is editing a message…",
        step_title="Editing a message",
        journal=journalled(redo(lambda adapter, a: adapter.edit(str(a["ref"]), str(a["text"])))),
        feature="edit",
        starts="deferred",
    ),
    ToolSpec(
        name="channel_retract",
        label="Retract your message",
        description="Delete a message you posted in this conversation.",
        args=RetractArgs,
        handler=lambda session, args: session.replies.retract(args),
        status="is removing a message…",
        step_title="Removing a message",
        journal=journalled(redo(lambda adapter, a: adapter.retract(str(a["ref"])))),
        feature="retract",
        starts="deferred",
    ),
    ToolSpec(
        name="channel_fetch_file",
        label="Fetch a file",
        description=(
            "Download a file attached to a message of this conversation into your task directory; returns "
            "its local path, media type, size and sha256."
        ),
        args=FetchFileArgs,
        handler=lambda session, args: session.files.fetch_file(args),
        status="is opening a file…",
        step_title="Fetching a file",
        journal=NO_WRITES,
        feature="fetch_file",
        starts="deferred",
    ),
    ToolSpec(
        name="channel_attach",
        label="Attach a file",
        description=(
            "Upload a file from your task directory into this conversation, with an optional title and "
            "comment."
        ),
        args=AttachArgs,
        handler=lambda session, args: session.files.attach(args),
        status="is attaching a file…",
        step_title="Attaching a file",
        # Uploads and documents carry no marker to look for: reported, never repeated.
        journal=journalled(settle_unknown),
        feature="attach",
        starts="deferred",
    ),
    ToolSpec(
        name="channel_post_document",
        label="Post a document",
        description=(
            "Create a rich document (a Slack canvas) from Markdown and share it in this conversation."
        ),
        args=PostDocumentArgs,
        handler=lambda session, args: session.files.post_document(args),
        status="is writing a document…",
        step_title="Writing a document",
        journal=journalled(settle_unknown),
        feature="documents",
        starts="deferred",
    ),
    ToolSpec(
        name="channel_set_title",
        label="Rename the conversation",
        description=(
            "Give this conversation a short title people see on it in Slack (its agent session), when "
            "what it is about has become clear or has changed."
        ),
        args=TitleArgs,
        handler=lambda session, args: session.set_title(args),
        status=None,
        step_title="Naming the conversation",
        # A title set twice is the same title: nothing to journal or settle.
        journal=WRITES_OUTSIDE,
        feature="sessions",
        starts="deferred",
    ),
    ToolSpec(
        name="channel_follow_up",
        label="Schedule a follow-up",
        description=(
            "Come back to this conversation later: schedule a follow-up or reminder (at a time, or after "
            "20m, 3h, 2d) with a note of what to do then; you are woken in this thread when it is due."
        ),
        args=FollowUpArgs,
        handler=lambda session, args: session.follow_ups.follow_up(args),
        status=None,
        step_title=None,
        journal=WRITES_OUTSIDE,
        feature=None,
        starts="deferred",
    ),
    ToolSpec(
        name="channel_follow_ups",
        label="List follow-ups",
        description=(
            "List the follow-ups and reminders scheduled in this conversation that have not fired yet."
        ),
        args=NoArgs,
        handler=lambda session, args: session.follow_ups.follow_ups(args),
        status=None,
        step_title=None,
        journal=NO_WRITES,
        feature=None,
        starts="deferred",
    ),
    ToolSpec(
        name="channel_cancel_follow_up",
        label="Cancel a follow-up",
        description="Cancel a scheduled follow-up or reminder of this conversation by its handle (fu_...).",
        args=CancelFollowUpArgs,
        handler=lambda session, args: session.follow_ups.cancel_follow_up(args),
        status=None,
        step_title=None,
        journal=WRITES_OUTSIDE,
        feature=None,
        starts="deferred",
    ),
    ToolSpec(
        name="channel_ask",
        label="Ask a question",
        description=(
            "Ask the person a question in this conversation, with 2-5 options as buttons or a free-text "
            "answer. Returns {question: q_..., status: asked}; end your turn: the answer arrives as a new "
            "message ('Alice answered q_...: ...'), or 'expired' when nobody answers in time."
        ),
        args=AskArgs,
        handler=lambda session, args: session.asking.ask(session, args),
        status=None,
        step_title=None,
        journal=WRITES_OUTSIDE,
        feature="ask",
        starts="deferred",
    ),
    ToolSpec(
        name="channel_request_approval",
        label="Request approval",
        description=(
            "Ask a person to approve or deny something you intend to do (an approve/deny card). Returns "
            "{approval: ap_..., status: pending}; end your turn: the decision arrives as a new message. "
            "Keep your promise: do not do it unless approved."
        ),
        args=RequestApprovalArgs,
        handler=lambda session, args: session.asking.request_approval(session, args),
        status=None,
        step_title=None,
        journal=WRITES_OUTSIDE,
        feature="ask",
        starts="deferred",
    ),
    ToolSpec(
        name="channel_check_approval",
        label="Check an approval",
        description="Look up an approval you requested: {status: pending|approved|denied|expired, by?, at?}.",
        args=CheckApprovalArgs,
        handler=lambda session, args: session.asking.check_approval(session, args),
        status=None,
        step_title=None,
        journal=WRITES_OUTSIDE,
        feature="ask",
        starts="deferred",
    ),
    ToolSpec(
        name="no_reply",
        label="Stay silent",
        description=(
            "End your turn without posting anything (when a message is not for you). Nothing you write "
            "after it is posted."
        ),
        args=NoReplyArgs,
        handler=lambda session, args: session.asking.no_reply(args),
        status=None,
        step_title=None,
        journal=NO_WRITES,
        feature=None,
        starts="active",
    ),
)

TOOL_SEARCH = ToolSpec(
    name="tool_search",
    label="Find tools",
    description=(
        "Find and enable more tools by describing what you want to do (e.g. 'edit my message', "
        "'download a file'). Enabled tools are available from your next step on."
    ),
    args=ToolSearchArgs,
    handler=lambda session, args: session.offer.tool_search(args),
    status="is looking for tools…",
    step_title="Looking for tools",
    journal=WRITES_OUTSIDE,
    feature=None,
    starts="active",
)

# The seed's name for tool_search, kept as an alias while the host's (MCP) tools wait to be found.
MCP_SEARCH = ToolSpec(
    name="mcp_search",
    label="Find tools",
    description=(
        "Same as tool_search: find and enable more tools, including those of connected MCP servers, "
        "by describing what you want to do. Enabled tools are available from your next step on."
    ),
    args=ToolSearchArgs,
    handler=lambda session, args: session.offer.tool_search(args),
    status="is looking for tools…",
    step_title=None,
    journal=WRITES_OUTSIDE,
    feature=None,
    starts="active",
)

SKILLS = ToolSpec(
    name="skills",
    label="Skills",
    description="List the skills (how-to guides) available to you, or read one by name.",
    args=SkillsArgs,
    handler=lambda session, args: session.offer.skills(args),
    status="is reading its skills…",
    step_title="Reading its skills",
    journal=NO_WRITES,
    feature=None,
    starts="active",
)

CATALOG: dict[str, ToolSpec] = {spec.name: spec for spec in (*CHANNEL_TOOLS, TOOL_SEARCH, SKILLS)}
#: Tools offered by themselves when there is something for them to do (mcp_search only with MCP
#: tools deferred, so it is not in the catalog); naming one in the agent file's ``tools`` is a no-op.
AUTOMATIC = frozenset({TOOL_SEARCH.name, MCP_SEARCH.name, SKILLS.name})


def spec_named(name: str) -> ToolSpec | None:
    """The spec of the channel tool ``name`` (``mcp_search`` too); None for a host's tool."""
    return MCP_SEARCH if name == MCP_SEARCH.name else CATALOG.get(name)
