"""The price table: US dollars per million tokens by model id, kept in one data file.

The table ships as package data (`journal/data/prices.json`, with the date it was taken and
where from). It is the one owner of model prices in the project: `journal usage` prices a
message from it when the message recorded no cost, and the agent reads it (through
`load_prices`) to record the cost of each reply. A file of the same shape given by the caller,
or named by `$JOURNAL_PRICES`, replaces it.

The file holds `asOf`, `source` and `models`, a list of `{"prefix", "input", "output",
"cacheRead", "cacheWrite"}`; a model id takes the price of the longest prefix it starts with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from typing import Any

import orjson

from .errors import JournalError

PRICES_ENV = "JOURNAL_PRICES"
"""The environment variable naming a price file that replaces the bundled one."""

_RATES = (("input", "input"), ("output", "output"), ("cacheRead", "cache_read"),
          ("cacheWrite", "cache_write"))


@dataclass(frozen=True)
class ModelPrice:
    """Dollars per million tokens for the model ids starting with `prefix`."""

    prefix: str
    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, input: int, output: int, cache_read: int, cache_write: int) -> float:
        """Dollars for these token counts."""
        return (input * self.input + output * self.output + cache_read * self.cache_read
                + cache_write * self.cache_write) / 1_000_000

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, **{key: getattr(self, attr) for key, attr in _RATES}}


@dataclass(frozen=True)
class PriceTable:
    """A price table as read from its file: the prices, their date and their source."""

    models: tuple[ModelPrice, ...]
    as_of: str
    source: str
    path: str

    def price_for(self, model_id: str) -> ModelPrice | None:
        """The price of `model_id` (longest matching prefix), or None when it is not listed.

        Ids as other gateways spell them are matched too: `anthropic/claude-sonnet-4.5`,
        `us.anthropic.claude-sonnet-4-5-20250929-v1:0`, `claude-sonnet-4-5@20250929`.
        """
        key = canonical_model(model_id)
        best: ModelPrice | None = None
        for price in self.models:
            if key.startswith(price.prefix) and (best is None
                                                 or len(price.prefix) > len(best.prefix)):
                best = price
        return best

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "asOf": self.as_of, "source": self.source,
                "models": [m.to_json() for m in self.models]}


def canonical_model(model_id: str) -> str:
    """`model_id` as the price table spells it: lower case, without a gateway's prefix
    (`anthropic/`, `us.anthropic.`), dots in the version turned to dashes."""
    key = model_id.strip().lower()
    start = key.find("claude")
    if start > 0 and key[start - 1] in "./:":
        key = key[start:]
    return key.replace(".", "-")


def bundled_prices_path() -> str:
    """The path of the price file shipped with journal."""
    return str(resources.files("journal").joinpath("data", "prices.json"))


def load_prices(path: str | os.PathLike[str] | None = None) -> PriceTable:
    """Read a price table: `path` if given, else the file `$JOURNAL_PRICES` names, else the
    bundled one.

    Raises:
        JournalError: the file cannot be read or is not a price table (the message names it).

    Example:
        >>> load_prices().price_for("claude-sonnet-4-5").output
        15.0
    """
    chosen = os.fspath(path) if path is not None else (os.environ.get(PRICES_ENV)
                                                       or bundled_prices_path())
    try:
        with open(chosen, "rb") as f:
            data = orjson.loads(f.read())
    except OSError as e:
        raise JournalError(f"{chosen}: cannot read the price file ({e.strerror or e})") from e
    except orjson.JSONDecodeError as e:
        raise JournalError(f"{chosen}: the price file is not valid JSON ({e})") from e
    return _table(chosen, data)


def _table(path: str, data: object) -> PriceTable:
    def bad(what: str) -> JournalError:
        return JournalError(f"{path}: not a price table: {what}")

    if not isinstance(data, dict):
        raise bad("expected a JSON object with 'asOf', 'source' and 'models'")
    as_of, source, models = data.get("asOf"), data.get("source", ""), data.get("models")
    if not isinstance(as_of, str) or not as_of:
        raise bad("'asOf' (the date the prices were taken) is missing")
    if not isinstance(source, str):
        raise bad("'source' must be a string")
    if not isinstance(models, list):
        raise bad("'models' must be a list")
    prices = []
    for n, item in enumerate(models):
        if not isinstance(item, dict) or not isinstance(item.get("prefix"), str) \
                or not item["prefix"]:
            raise bad(f"models[{n}] needs a non-empty 'prefix'")
        rates: dict[str, float] = {}
        for key, attr in _RATES:
            value = item.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise bad(f"models[{n}] ({item['prefix']}): '{key}' must be a number, 0 or more")
            rates[attr] = float(value)
        prices.append(ModelPrice(canonical_model(item["prefix"]), **rates))
    return PriceTable(tuple(prices), as_of, source, path)
