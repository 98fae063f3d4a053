"""/threadbound usage prices a person's tokens by model at list prices (genai-prices), and says
which tokens it could not price."""

from __future__ import annotations

import time
from decimal import Decimal

from app.agent.prices import cost, total_cost
from app.agent.usage import utc_day
from app.intake.personal import Personal
from storage.base import Store, UsageRecord


def _used(person: str, model: str, tokens_in: int, tokens_out: int, day: str) -> UsageRecord:
    return UsageRecord(
        day=day, person=person, channel="C1", input_tokens=tokens_in, output_tokens=tokens_out,
        requests=1, task_id="T1", model=model, at=time.time(),
    )  # fmt: skip


async def test_usage_is_priced_by_model_and_unknown_models_are_said(store: Store) -> None:
    day = utc_day(time.time())
    for record in (
        _used("U1", "gpt-4o-mini", 1_000_000, 0, day),  # $0.15 per million input tokens
        _used("U1", "gpt-4o-mini", 0, 1_000_000, day),  # $0.60 per million output tokens
        _used("U1", "local-llama", 100, 20, day),
        _used("U2", "gpt-4o-mini", 5_000_000, 0, day),  # another person's: not Alice's bill
    ):
        await store.record_usage(record)
    rows = await store.person_usage_by_model("U1", day)
    assert [(r.model, r.input_tokens, r.output_tokens, r.requests) for r in rows] == [
        ("gpt-4o-mini", 1_000_000, 1_000_000, 2),
        ("local-llama", 100, 20, 1),
    ]
    assert cost(rows[0]) == Decimal("0.75") and cost(rows[1]) is None
    assert total_cost(rows).unpriced_tokens == 120
    usage = await Personal(store, budget=0).usage("U1")
    assert "about $0.7500 (plus 120 tokens of models with no known price) at list prices" in usage.line()
