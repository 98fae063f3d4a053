"""The store's per-person MCP credentials and authorizations, on every backend, and their sealing."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from app.agent.mcp.authorizations import is_authorization
from app.agent.mcp.vault import TokenVault, VaultKeyError, new_key
from app.ops.mcp_disconnect import mcp_disconnect_command
from app.service import open_ready_store
from app.settings import Settings
from storage.base import Store
from storage.sqlstore_mcp_tokens import McpAuthorization

T0 = 1_700_000_000.0


async def _asked(store: Store, state_hash: str = "h1", user: str = "U1") -> str:
    task = await store.create_task(channel="C1", thread_ts="500.000001", now=T0)
    record = McpAuthorization(
        state_hash, "tickets", user, task.task_id, "C1", "500.000001", "sealed", T0, None
    )
    await store.mcp_tokens.open_authorization(record)
    return task.task_id


async def test_tokens_are_kept_per_server_and_person_and_forgotten(store: Store) -> None:
    """put replaces, get reads one person's, connected lists people (not the client row), delete forgets."""
    tokens = store.mcp_tokens
    await tokens.put("tickets", "", "client", now=T0)
    await tokens.put("tickets", "U1", "a1", now=T0)
    await tokens.put("tickets", "U2", "b1", now=T0 + 1)
    await tokens.put("tickets", "U1", "a2", now=T0 + 2)
    await tokens.put("docs", "U1", "d1", now=T0)
    assert await tokens.get("tickets", "U1") == "a2"
    assert await tokens.connected("tickets") == ["U1", "U2"]
    assert await tokens.delete("tickets", "U1") is True
    assert await tokens.delete("tickets", "U1") is False
    assert await tokens.get("tickets", "U1") is None
    assert await tokens.get("docs", "U1") == "d1"
    assert await tokens.get("tickets", "") == "client"


async def test_an_authorization_is_decided_once_and_wakes_its_task_once(store: Store) -> None:
    """Concurrent decisions: one wins and appends the one inbox item that resumes the task."""
    task_id = await _asked(store)
    payload = '{"kind": "mcp_authorization", "server": "tickets", "user": "U1", "status": "connected"}'
    won = await asyncio.gather(
        *(
            store.mcp_tokens.decide_authorization("h1", decision=d, user_id="U1", payload=payload, now=T0 + 1)
            for d in ("connected", "declined", "connected")
        )
    )
    assert sorted(won) == [False, False, True]
    [item] = await store.pending_inbox(task_id)
    assert item.payload == payload
    record = await store.mcp_tokens.get_authorization("h1")
    assert record is not None and record.decision in ("connected", "declined")


async def test_a_superseded_authorization_wakes_nobody_and_old_ones_are_listed(store: Store) -> None:
    """An empty payload decides without an inbox item; open ones older than a time are listed."""
    task_id = await _asked(store)
    assert await store.mcp_tokens.open_for("tickets", "U1", task_id) == ["h1"]
    assert await store.mcp_tokens.expired_authorizations(before=T0 + 1) == ["h1"]
    assert await store.mcp_tokens.decide_authorization(
        "h1", decision="expired", user_id="", payload="", now=T0
    )
    assert await store.pending_inbox(task_id) == []
    assert await store.mcp_tokens.expired_authorizations(before=T0 + 1) == []


def test_the_vault_seals_opens_and_rotates_keys() -> None:
    """Sealed text holds no plain value; a new key first still opens the old; a foreign key opens nothing."""
    old, new = new_key(), new_key()
    sealed = TokenVault(old).seal({"token": "canary-secret"})
    assert "canary-secret" not in sealed
    assert TokenVault(f"{new},{old}").open(sealed) == {"token": "canary-secret"}
    assert TokenVault(new).open(sealed) is None
    assert TokenVault(new).open("not sealed") is None
    with pytest.raises(VaultKeyError, match="Fernet key"):
        TokenVault("too-short")


def test_an_authorization_payload_is_recognised() -> None:
    assert is_authorization({"kind": "mcp_authorization"}) and not is_authorization({"kind": "ask_decision"})


async def test_mcp_disconnect_forgets_one_persons_tokens(tmp_path: Path) -> None:
    """``python -m app mcp-disconnect tickets U1`` deletes U1's tokens only, and says whether it did."""
    settings = Settings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    store = await open_ready_store(settings)
    try:
        await store.mcp_tokens.put("tickets", "U1", "sealed-1", now=T0)
        await store.mcp_tokens.put("tickets", "U2", "sealed-2", now=T0)
    finally:
        await store.close()
    said = io.StringIO()
    assert await mcp_disconnect_command(settings, "tickets", "U1", out=said) == 0
    assert await mcp_disconnect_command(settings, "tickets", "U1", out=said) == 0
    assert said.getvalue().splitlines() == [
        "threadbound: disconnected U1 from tickets",
        "threadbound: U1 was not connected to tickets",
    ]
    store = await open_ready_store(settings)
    try:
        assert await store.mcp_tokens.get("tickets", "U1") is None
        assert await store.mcp_tokens.get("tickets", "U2") == "sealed-2"
    finally:
        await store.close()
