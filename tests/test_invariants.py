"""Invariant 1 and the closed-schema rule: no tool can be pointed at another conversation.

Every registered tool's input schema is walked, nested ``$defs``/``properties``/``items``/
``anyOf`` included, both as the catalog builds it and as pydantic-ai actually sends it to a
model; and every tool refuses an unknown argument before anything reaches Slack.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from channel.contract import Origin
from channel.fake import FakeAdapter
from channel.selection import select_tools
from channel.session import ChannelSession
from channel.skills import Skill, SkillLibrary
from channel.tools import CATALOG, MCP_SEARCH, closed_schema
from storage import open_store
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.sessions import slack_session
from threadbound_emulator import FakeSlack

# Fragments of a property name that would let a caller address a conversation, person or workspace.
_ADDRESSING = re.compile(r"channel|thread|user|team|workspace|conversation|recipient|target", re.IGNORECASE)
# Whole words (after splitting on _ - . and camelCase) that address something on their own.
_ADDRESSING_WORDS = frozenset({"ts", "to", "dm", "im"})
DEFERRED = [s.name for s in CATALOG.values() if s.starts == "deferred"]


def is_addressing(name: str) -> bool:
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    return bool(_ADDRESSING.search(name)) or any(w in _ADDRESSING_WORDS for w in words)


def addressing_properties(node: Any, path: str = "") -> list[str]:
    """Paths of every property, at any depth, whose name addresses a channel, thread, user or workspace."""
    found: list[str] = []
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            for name, sub in props.items():
                here = f"{path}.{name}" if path else str(name)
                if is_addressing(str(name)):
                    found.append(here)
                found += addressing_properties(sub, here)
        for key, value in node.items():
            if key != "properties":
                found += addressing_properties(value, f"{path}/{key}" if path else key)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += addressing_properties(value, f"{path}[{index}]")
    return found


def schema_nodes(node: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema (a dict) in ``node`` with its path; a ``properties`` mapping is not one itself,
    its values are (so a property called "title" or "type" is a name, not a keyword); defaults,
    constants, enums and examples are data, not schemas."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            if key in ("default", "const", "enum", "examples"):
                continue
            if key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    yield from schema_nodes(sub, f"{path}.{name}")
            else:
                yield from schema_nodes(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from schema_nodes(value, f"{path}[{index}]")


def open_objects(node: Any) -> list[str]:
    """Paths of every object node (``type: object`` or with ``properties``) that is not closed."""
    return [
        path
        for path, each in schema_nodes(node)
        if (each.get("type") == "object" or isinstance(each.get("properties"), dict))
        and each.get("additionalProperties") is not False
    ]


def titled(node: Any) -> list[str]:
    """Paths of every schema carrying a ``title`` keyword."""
    return [path for path, each in schema_nodes(node) if "title" in each]


# -- the walkers can fail ---------------------------------------------------------------------


def test_walker_flags_nested_addressing_properties() -> None:
    """The walker finds addressing names nested in properties, $defs, items and anyOf, and only those."""
    schema = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "opts": {"type": "object", "properties": {"channel_id": {"type": "string"}}},
            "many": {"type": "array", "items": {"type": "object", "properties": {"userId": {}}}},
            "either": {"anyOf": [{"type": "object", "properties": {"to": {}}}, {"type": "null"}]},
        },
        "$defs": {"Where": {"type": "object", "properties": {"message_ts": {}, "emoji": {}}}},
    }
    flagged = addressing_properties(schema)
    assert any(p.endswith("opts.channel_id") for p in flagged)
    assert any(p.endswith("userId") for p in flagged)
    assert any(p.endswith(".to") for p in flagged)
    assert any(p.endswith("message_ts") for p in flagged)
    assert len(flagged) == 4
    assert addressing_properties({"properties": {"opts": {"properties": {"channel_id": {}}}}}) == [
        "opts.channel_id"
    ]
    for harmless in ("text", "message", "emoji", "action", "file", "path", "query", "limit", "cursor"):
        assert not is_addressing(harmless)


def test_closed_walker_flags_open_nested_objects() -> None:
    """The closed-schema walker finds an object without additionalProperties: false at any depth."""
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"opts": {"type": "object", "properties": {"x": {}}}},
        "$defs": {"D": {"properties": {"y": {}}, "additionalProperties": True}},
    }
    assert open_objects(schema) == ["$.opts", "$/$defs/D"]


def test_title_walker_flags_title_keywords_not_properties_called_title() -> None:
    """The title walker finds a title keyword at any depth, and never a property named "title"."""
    schema = {
        "title": "Args",
        "properties": {
            "title": {"type": "string"},
            "opts": {"anyOf": [{"title": "Opts", "type": "object"}, {"type": "null"}]},
        },
    }
    assert titled(schema) == ["$", "$.opts/anyOf[0]"]
    assert titled({"properties": {"title": {"type": "string"}}}) == []


def test_closing_a_schema_leaves_its_data_alone() -> None:
    """Defaults, constants, enums and examples are data: a "title" key or an object in them stays."""

    class Args(BaseModel):
        opts: dict[str, Any] = Field(default={"title": "kept", "type": "object"}, examples=[{"title": "x"}])

    schema = closed_schema(Args)
    assert schema["properties"]["opts"]["default"] == {"title": "kept", "type": "object"}
    assert schema["properties"]["opts"]["examples"] == [{"title": "x"}]
    assert titled(schema) == [] and open_objects(schema) == []


# -- the catalog's schemas ----------------------------------------------------------------------


# The host's own tools: the catalog, and mcp_search (offered only while MCP tools are deferred).
OWN_TOOLS = {**CATALOG, MCP_SEARCH.name: MCP_SEARCH}


@pytest.mark.parametrize("name", list(OWN_TOOLS))
def test_catalog_schema_has_no_addressing_property(name: str) -> None:
    """No tool's input schema, at any depth, has a property naming a channel, thread, user or workspace."""
    assert addressing_properties(OWN_TOOLS[name].schema()) == []


@pytest.mark.parametrize("name", list(OWN_TOOLS))
def test_catalog_schema_is_closed(name: str) -> None:
    """Every object in every tool's input schema says additionalProperties: false."""
    schema = OWN_TOOLS[name].schema()
    assert schema["type"] == "object" and open_objects(schema) == []


@pytest.mark.parametrize("name", list(OWN_TOOLS))
def test_catalog_schema_has_no_titles_and_keeps_every_property(name: str) -> None:
    """pydantic's titles (each property's name again: tokens in every request to providers whose
    pydantic-ai profile keeps them) are left out at every depth; every property stays, one called
    "title" included (channel_attach, channel_post_document)."""
    spec = OWN_TOOLS[name]
    schema = spec.schema()
    assert titled(schema) == []
    assert set(schema.get("properties", {})) == set(spec.args.model_json_schema().get("properties", {}))


# -- what a model actually receives ---------------------------------------------------------------


async def test_schemas_sent_to_the_model_are_closed_and_unaddressed(tmp_path: Path) -> None:
    """Every tool definition pydantic-ai sends, deferred ones after tool_search enabled them, is clean."""
    offered: dict[str, dict[str, Any]] = {}
    requests = 0

    def script(turn: Turn) -> list[Any]:
        nonlocal requests
        requests += 1
        for tool in turn.info.function_tools:
            offered[tool.name] = tool.parameters_json_schema
        if requests == 1:
            return [
                call("tool_search", query="edit retract fetch attach document", limit=10),
                call("tool_search", query="ask approval", limit=10),
                call("tool_search", query="follow-up", limit=10),
                call("tool_search", query="rename conversation title", limit=1),
            ]
        if requests == 2:
            return [call("channel_reply", text="all seen")]
        return [""]

    skills_dir = tmp_path / "skills"
    skills_dir.mkdir()
    (skills_dir / "triage.md").write_text("# Triage bugs\n\nSteps.\n")
    async with FakeSlack() as slack:
        slack.scopes.append("assistant:write")  # an agent app: channel_set_title too
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data", skills_dir=skills_dir
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
            await app.idle()
    assert set(offered) == set(CATALOG)
    for name, schema in offered.items():
        assert addressing_properties(schema) == [], name
        assert open_objects(schema) == [], name
    assert [m["text"] for m in slack.bot_messages("C1")] == ["all seen"]


async def test_extra_argument_through_the_agent_is_refused_without_a_post(tmp_path: Path) -> None:
    """A model's channel_reply with an extra channel argument gets invalid_arguments and posts nothing."""
    results: list[Any] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            return [call("channel_reply", text="to elsewhere", channel="C2")]
        results.extend(r for _, r in turn.results)
        return [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_channel("C2", "random")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
            await app.idle()
        assert slack.count("chat.postMessage") == 0
    [result] = results
    assert result["error"]["code"] == "invalid_arguments" and "channel" in result["error"]["message"]


# -- an unknown argument is refused before Slack hears of it, for every tool ------------------------


@dataclass
class Env:
    fake: FakeSlack
    session: ChannelSession
    valid: dict[str, dict[str, Any]]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with FakeSlack() as fake:
        fake.scopes.append("assistant:write")  # an agent app: channel_set_title is offered too
        fake.add_user("U1", "alice", display_name="Alice")
        fake.add_channel("C1", "general")
        fake.add_file("F1", "notes.txt", "text/plain", b"notes")
        root = fake.add_message("C1", "<@UBOT> look", "U1", files=[fake.file_object("F1")])
        skills = SkillLibrary([Skill("triage", "Triage bugs", "# Triage bugs\n")])
        async with slack_session(
            fake, tmp_path, channel="C1", thread_ts=root, enabled=DEFERRED, skills=skills
        ) as slack_env:
            session = slack_env.session
            (slack_env.task_dir / "out.txt").write_text("result")
            posted = await session.call("channel_reply", {"text": "mine"})
            [row, _] = (await session.call("channel_read", {}))["messages"]
            valid: dict[str, dict[str, Any]] = {
                "channel_reply": {"text": "hi"},
                "channel_read": {"limit": 5},
                "channel_react": {"message": row["message"], "emoji": "eyes"},
                "channel_edit": {"message": posted["message"], "text": "changed"},
                "channel_retract": {"message": posted["message"]},
                "channel_fetch_file": {"file": row["files"][0]["file"]},
                "channel_attach": {"path": "out.txt"},
                "channel_post_document": {"title": "Plan", "markdown": "# Plan"},
                "tool_search": {"query": "edit"},
                "skills": {"name": "triage"},
                "channel_ask": {"question": "Where?", "options": ["staging", "prod"]},
                "channel_request_approval": {"action": "Archive the tickets"},
                "channel_check_approval": {"approval": "ap_AAAAAAAAAAAAAAAAAAAAAA"},
                "no_reply": {},
                "channel_follow_up": {"after": "2h", "note": "check the deploy"},
                "channel_follow_ups": {},
                "channel_cancel_follow_up": {"follow_up": "fu_AAAAAAAAAAAAAAAAAAAAAA"},
                "channel_set_title": {"title": "Offsite"},
            }
            yield Env(fake, session, valid)


@pytest.mark.parametrize("name", list(CATALOG))
@pytest.mark.parametrize("extra", ["channel_id", "thread_ts", "verbose"])
async def test_extra_argument_is_an_error_and_calls_nothing(env: Env, name: str, extra: str) -> None:
    """Valid arguments plus one unknown one give invalid_arguments naming it, and no Slack call at all."""
    assert set(env.valid) == set(CATALOG)
    if name == "tool_search":
        env.session.enabled.discard("channel_post_document")  # it is offered while something is deferred
    assert env.session.offered(name)
    CATALOG[name].args.model_validate(env.valid[name])  # the base arguments are themselves valid
    calls = len(env.fake.calls)
    result = await env.session.call(name, {**env.valid[name], extra: "C2"})
    assert result["error"]["code"] == "invalid_arguments"
    assert extra in result["error"]["message"]
    assert len(env.fake.calls) == calls


async def test_extra_argument_reaches_no_fake_adapter_either(tmp_path: Path) -> None:
    """With the in-memory adapter too, an extra argument is refused before any adapter call."""
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    await store.migrate()
    try:
        root = adapter.add_message(Origin("general"), "hello")
        task = await store.create_task(channel="general", thread_ts=root.ts, now=time.time())
        session = ChannelSession(
            adapter=adapter,
            store=store,
            task=task,
            origin=Origin("general", root.ts),
            tools=select_tools(adapter.features.enabled(), None, SkillLibrary([])),
            task_dir=tmp_path / "task",
        )
        result = await session.call("channel_read", {"limit": 3, "conversation": "elsewhere"})
        assert result["error"]["code"] == "invalid_arguments"
        assert adapter.calls == []
    finally:
        await store.close()
