"""List prices of the models the CLI runs, per million tokens, for runs killed before their result.

Measured as described in docs/cli-behaviour.md#models-and-prices.

A finished run's cost comes from the CLI itself (`ResultMessage.model_usage[*].costUSD`); this table is only used
to price the usage an attempt's stream events showed when it was stopped before a result arrived.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Price:
    """USD per million tokens of one model."""

    input: float
    output: float

    @property
    def cache_read(self) -> float:
        """Cache hits cost a tenth of input."""
        return self.input * 0.1

    @property
    def cache_write_5m(self) -> float:
        """A 5-minute cache write costs 1.25x input."""
        return self.input * 1.25

    @property
    def cache_write_1h(self) -> float:
        """A 1-hour cache write costs 2x input."""
        return self.input * 2.0


#: Measured from the CLI's own `total_cost_usd`. Keys are model ids without a date suffix.
PRICES: dict[str, Price] = {
    "claude-sonnet-5-5": Price(input=2.0, output=10.0),
    "claude-opus-5-5": Price(input=4.0, output=20.0),
    "claude-haiku-5-5": Price(input=0.5, output=0.5),  # output really equals input here (measured)
    "claude-sonnet-4-5": Price(input=3.0, output=15.0),
    "claude-3-5-haiku": Price(input=0.8, output=4.0),
    "claude-fable-5-2": Price(input=8.0, output=40.0),  # only the 1M+1M total ($48) was measured; split assumed
}

#: Aliases the CLI resolves before sending (measured: `opus` and `claude-opus-4-1` are sent as opus-5-5).
ALIASES: dict[str, str] = {
    "sonnet": "claude-sonnet-5-5",
    "opus": "claude-opus-5-5",
    "haiku": "claude-haiku-5-5",
    "claude-opus-4-1": "claude-opus-5-5",
    "fable": "claude-fable-5-2",
}

_DATE_SUFFIX = re.compile(r"-\d{8}$")


def canonical_id(model: str) -> str:
    """`model` as the pricing table keys it: lower case, without a date suffix, an alias resolved."""
    name = _DATE_SUFFIX.sub("", model.strip().lower())
    return ALIASES.get(name, name)


def price_of(model: str | None) -> Price | None:
    """The price of `model` (id or alias), or None when unknown."""
    if not model:
        return None
    return PRICES.get(canonical_id(model))


def cost_usd(
    model: str | None,
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read_tokens: int = 0,
    cache_write_5m_tokens: int = 0,
    cache_write_1h_tokens: int = 0,
) -> float:
    """Dollar cost of the given token counts at `model`'s list price; an unknown model costs 0 (priced nowhere)."""
    price = price_of(model)
    if price is None:
        # Unknown model: counting tokens still works; a made-up price would mislead the cost metrics more than 0.
        return 0.0
    total = (
        input_tokens * price.input
        + output_tokens * price.output
        + cache_read_tokens * price.cache_read
        + cache_write_5m_tokens * price.cache_write_5m
        + cache_write_1h_tokens * price.cache_write_1h
    )
    return total / 1_000_000
