"""Cards are neutral data: app/agent builds them, only channel/slack draws Block Kit, and a second
adapter (the fake) shows a card with no provider markup at all."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

from app.agent.approval_cards import APPROVE, DENY, decided_card, open_card
from app.agent.approvals import Approvals
from channel.cards import Card, Mention, Time
from channel.contract import Origin
from channel.fake import ALL_FEATURES, FakeAdapter
from storage.base import ApprovalRecord

ROOT = Path(__file__).resolve().parent.parent
#: Where provider markup must not appear: the agent, the run, and the channel outside its Slack adapter.
_NEUTRAL = [ROOT / "app" / "agent", ROOT / "app" / "runs", ROOT / "channel"]
_BLOCK_KIT = frozenset(
    {"section", "actions", "button", "mrkdwn", "plain_text", "context", "context_actions", "feedback_buttons"}
)
_SLACK_MODULES = ("slack_sdk", "slack_bolt", "channel.slack")

_ARGS = {
    "to": "attacker@evil.example",
    "params": {"cc": ["a@example.com", "b@example.com"], "note": "<!channel> & ```"},
    "body": "x" * 1500,
}


def _approval(**changes: Any) -> ApprovalRecord:
    record = ApprovalRecord(
        approval_id="apv_1",
        task_id="t1",
        tool_call_id="call_1",
        tool="mail_send",
        args=json.dumps(_ARGS),
        requester="U1",
        channel="C1",
        thread_ts="",
        card_effect="e1",
        card_ts="",
        created_at=1_700_000_000.0,
    )
    return dataclasses.replace(record, **changes)


def _neutral_files() -> list[Path]:
    slack = ROOT / "channel" / "slack"
    return [p for d in _NEUTRAL for p in sorted(d.rglob("*.py")) if slack not in p.parents]


def _has_markup(value: Any) -> bool:
    """Whether ``value`` (a card as plain data) holds a Block Kit element: a mapping with a ``type``."""
    if isinstance(value, dict):
        return "type" in value or any(_has_markup(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_markup(v) for v in value)
    return False


async def test_the_fake_adapter_keeps_an_approval_card_as_neutral_data_with_every_argument() -> None:
    """Posted through the fake, the approval card is plain data: every argument key is a field (short
    values whole, the long one too), choices carry the approval id, and no Block Kit is in it."""
    adapter = FakeAdapter(features=dataclasses.replace(ALL_FEATURES, ask=True))
    posted = await adapter.post_card(Origin("C1"), open_card(_approval(), 3600.0), effect_id="e1")
    card = adapter.cards[posted.ref]
    fields = {f.label: f.value for group in card.fields for f in group}
    assert set(fields) == {"to", "params.cc[0]", "params.cc[1]", "params.note", "body"}
    assert fields["to"] == '"attacker@evil.example"' and fields["params.note"] == '"<!channel> & ```"'
    assert fields["body"] == json.dumps("x" * 1500)
    assert [(c.action, c.value) for c in card.choices] == [(APPROVE, "apv_1"), (DENY, "apv_1")]
    assert card.state == "open" and Mention("U1") in card.note and card.requester == "U1"
    assert any(isinstance(span, Time) for span in card.note)
    assert not _has_markup(dataclasses.asdict(card))
    assert adapter.message(posted.ref) is not None and adapter.message(posted.ref).text == card.fallback  # type: ignore[union-attr]


async def test_a_decided_card_is_redrawn_on_the_fake_from_the_key_the_store_keeps() -> None:
    """The store keeps the key the adapter gave for the card (what a click reports); the redraw finds
    the card from it, with no ref parsed outside the adapter, and it shows who decided, no choices."""
    adapter = FakeAdapter(features=dataclasses.replace(ALL_FEATURES, ask=True))
    posted = await adapter.post_card(Origin("C1"), open_card(_approval(), 3600.0), effect_id="e1")
    key = adapter.click_key(posted.ref)
    assert adapter.clicked_ref("C1", key) == posted.ref
    decided = _approval(card_ts=key, decision="approved", decided_by="U2", decided_at=1_700_000_100.0)

    class _Store:
        async def get_approval(self, approval_id: str) -> ApprovalRecord:
            return decided

    approvals = Approvals(store=_Store(), adapter=adapter)  # type: ignore[arg-type]
    approvals._update_card("apv_1")
    await approvals.idle()
    card: Card = adapter.cards[posted.ref]
    assert card == decided_card(decided)
    assert card.state == "decided" and card.choices == () and Mention("U2") in card.note


def test_no_block_kit_or_slack_import_outside_channel_slack() -> None:
    """app/agent, app/runs and channel/ outside channel/slack import nothing of Slack and write no
    Block Kit element (a dict literal whose "type" is a block or element kind)."""
    found = []
    for path in _neutral_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
                if (
                    node.level == 1
                    and path.parent == ROOT / "channel"
                    and (node.module or "").startswith("slack")
                ):
                    names = ["channel." + (node.module or "")]
            elif isinstance(node, ast.Dict):
                kinds = [
                    v.value
                    for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and k.value == "type" and isinstance(v, ast.Constant)
                ]
                if any(kind in _BLOCK_KIT for kind in kinds):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: Block Kit {kinds}")
                continue
            else:
                continue
            for name in names:
                if name.split(".")[0] in _SLACK_MODULES or name.startswith("channel.slack"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {name}")
    assert found == []
    assert "CardSlack" not in "".join(p.read_text(encoding="utf-8") for p in _neutral_files())
