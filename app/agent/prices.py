"""What model tokens cost, in US dollars, from genai-prices' published list prices (no network).

The usage table keeps each request's model name as the provider reported it (``gpt-4o-mini-2024-07-18``,
``claude-sonnet-4-5``); :func:`cost` prices one model's token counts, and :func:`total_cost` a day's
rows. A model genai-prices does not know (a local server's, a gateway alias) has no price: the total
then says which tokens were left unpriced rather than guess. Prices are list prices, before any
discount or commitment the team may have; cache reads and writes are priced as such where the
provider prices them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from storage.base import UsageRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Cost:
    """The priced part of some usage, and the tokens of models that have no known price."""

    usd: Decimal
    unpriced_tokens: int = 0

    def text(self) -> str:
        """``$0.0123``, with what could not be priced said after it."""
        shown = f"${self.usd:,.4f}" if self.usd < 1 else f"${self.usd:,.2f}"
        if self.unpriced_tokens:
            shown += f" (plus {self.unpriced_tokens:,} tokens of models with no known price)"
        return shown


def cost(record: UsageRecord) -> Decimal | None:
    """What ``record``'s tokens cost at ``record.model``'s list price; None when it has none."""
    from genai_prices import Usage, calc_price

    if not record.model:
        return None
    usage = Usage(
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        cache_read_tokens=record.cache_read_tokens,
        cache_write_tokens=record.cache_write_tokens,
    )
    try:
        return calc_price(usage, model_ref=record.model).total_price
    except LookupError:
        return None


def total_cost(records: Iterable[UsageRecord]) -> Cost:
    """The cost of ``records`` (one model each), the unpriced models' tokens counted apart."""
    usd, unpriced = Decimal(0), 0
    for record in records:
        price = cost(record)
        if price is None:
            unpriced += record.input_tokens + record.output_tokens
        else:
            usd += price
    return Cost(usd, unpriced)
