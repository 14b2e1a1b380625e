"""Token and cost accounting: what sessions used, per session, per model and per day.

Every assistant message records its `usage` (`input`, `output`, `cacheRead`, `cacheWrite`,
`cost`). A Claude Code transcript is read by `journal.claude` (detected by `load`): the lines
of one API response (one `message.id`) are one message there, so its usage counts once (and
once only when the tree shows the response twice: a compaction's preserved segment), and
its `input_tokens`, `output_tokens`, `cache_read_input_tokens` and
`cache_creation_input_tokens` are read under these names; it records no cost, so it is priced
from the table. Each one is counted once per logical session, on every branch (an abandoned branch
was paid for too): a rotated session is read as its whole lineage, oldest file first, and an
entry whose id was already counted (a successor repeats the kept entries of its predecessor)
is skipped, and so is an imported transcript's copy of a kept segment (`<id>@<anchor>`,
`journal.claude.kept_copy_of`), as the transcript's own is. A fork copies the history it
grows from into a file of its own (pi's fork, a Claude Code transcript forked or resumed
into a new one, keeping each response's `message.id` and `requestId`, `journal import`
keeping the entries' ids and times): the fork's row counts it (it is the fork's history), and
`UsageReport`'s totals and its rows by model and day count each response once however many
sessions hold it (`_Ledger`: the copy with the most tokens counts, the others are
`repeated`). The cost of a message is the one it recorded; a message that recorded none (or
a zero cost for tokens the price table can price) is priced from the table, and counted as
computed. A message neither recorded nor priceable is counted as unpriced, at no cost.

Database sessions are counted as files are: a database URL or a session URL among the paths
stands for its lineages of sessions (`journal.discovery`), each read with `load`.

A damaged file is read as far as it can be; unreadable lines and files that are no session
are reported as warnings, and the other sessions are still counted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from .claude import ClaudeRead, kept_copy_of
from .discovery import find_lineages, subagents_of
from .errors import JournalError
from .pg.url import is_database_url, shown, shown_in
from .prices import PriceTable, load_prices
from .progress import Progress
from .snapshot import load, stored_size

By = Literal["session", "model", "day"]
BY: tuple[By, ...] = ("session", "model", "day")

RECORDED, COMPUTED, UNPRICED = 0, 1, 2
"""How a message's cost was found (`Tally.charge`)."""


@dataclass
class Tally:
    """Tokens and dollars of some assistant messages, and where the dollars came from."""

    messages: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0
    recorded_cost: float = 0.0
    computed_cost: float = 0.0
    computed: int = 0
    """Messages priced from the table (they recorded no cost)."""
    unpriced: int = 0
    """Messages with no recorded cost and no price in the table (counted at no cost)."""

    @property
    def total_tokens(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    @property
    def cost_source(self) -> str:
        """`recorded`, `computed`, `mixed` (some of each), or `none` (nothing priceable)."""
        recorded = self.messages - self.computed - self.unpriced
        if self.computed and recorded:
            return "mixed"
        if self.computed:
            return "computed"
        return "recorded" if recorded else "none"

    def add(self, other: Tally, sign: int = 1) -> None:
        """Add `other` in (`sign` -1: take it out)."""
        for name in ("messages", "input", "output", "cache_read", "cache_write", "cost",
                     "recorded_cost", "computed_cost", "computed", "unpriced"):
            setattr(self, name, getattr(self, name) + sign * getattr(other, name))

    def charge(self, counts: tuple[int, int, int, int], cost: float, how: int) -> None:
        """Count one message: its (input, output, cache read, cache write) tokens and its
        cost, `how` it was priced (`RECORDED`, `COMPUTED` or `UNPRICED`)."""
        self.messages += 1
        self.input += counts[0]
        self.output += counts[1]
        self.cache_read += counts[2]
        self.cache_write += counts[3]
        self.cost += cost
        if how == RECORDED:
            self.recorded_cost += cost
        elif how == COMPUTED:
            self.computed_cost += cost
            self.computed += 1
        else:
            self.unpriced += 1

    def to_json(self) -> dict[str, Any]:
        return {"messages": self.messages, "input": self.input, "output": self.output,
                "cacheRead": self.cache_read, "cacheWrite": self.cache_write,
                "totalTokens": self.total_tokens, "cost": self.cost,
                "costSource": self.cost_source, "recordedCost": self.recorded_cost,
                "computedCost": self.computed_cost, "computedMessages": self.computed,
                "unpricedMessages": self.unpriced}


@dataclass(frozen=True)
class UsageWarning:
    """A file that could not be counted, or only in part."""

    path: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


@dataclass
class SessionUsage:
    """The usage of one logical session (a lineage), by (model, day)."""

    path: str
    """The live file of the lineage."""
    files: list[str]
    """Every file read: the lineage, oldest first, then a Claude Code transcript's subagent
    files."""
    session_id: str | None = None
    name: str | None = None
    cells: dict[tuple[str, str], Tally] = field(default_factory=dict)
    unpriced_models: set[str] = field(default_factory=set)
    repeated: dict[tuple[str, str], Tally] = field(default_factory=dict)
    """Of `cells`, the responses another session of the same report counts too (a fork's
    copied history; see `_Ledger`): counted in this row, left out of the report's totals."""

    @property
    def total(self) -> Tally:
        total = Tally()
        for tally in self.cells.values():
            total.add(tally)
        return total

    @property
    def models(self) -> list[str]:
        return sorted({model for model, _ in self.cells})


@dataclass
class UsageReport:
    """What `usage` found: one `SessionUsage` per logical session, warnings, the prices."""

    sessions: list[SessionUsage]
    warnings: list[UsageWarning]
    prices: PriceTable

    @property
    def total(self) -> Tally:
        """Every response once, however many sessions hold it (a fork's copied history
        counts in both rows, once here)."""
        total = Tally()
        for session in self.sessions:
            total.add(session.total)
        total.add(self.repeated, -1)
        return total

    @property
    def repeated(self) -> Tally:
        """What the session rows hold more than once (the further copies of responses that
        several sessions hold), left out of `total` and of the rows by model and day."""
        repeated = Tally()
        for session in self.sessions:
            for tally in session.repeated.values():
                repeated.add(tally)
        return repeated

    @property
    def unpriced_models(self) -> list[str]:
        return sorted(set().union(*(s.unpriced_models for s in self.sessions)))

    def rows(self, by: By = "session") -> list[tuple[str, Tally]]:
        """Totals grouped `by` session (the live path), model or day (UTC), in that key's
        order (sessions as found, models by cost, days by date)."""
        if by == "session":
            return [(s.path, s.total) for s in self.sessions]
        if by not in ("model", "day"):
            raise ValueError(f"by must be one of {BY}, not {by!r}")
        groups: dict[str, Tally] = {}
        for session in self.sessions:
            for sign, cells in ((1, session.cells), (-1, session.repeated)):
                for (model, day), tally in cells.items():
                    groups.setdefault(model if by == "model" else day, Tally()).add(tally,
                                                                                   sign)
        if by == "model":
            return sorted(groups.items(), key=lambda kv: (-kv[1].cost, kv[0]))
        return sorted(groups.items())

    def to_json(self, by: By = "session") -> dict[str, Any]:
        named = {s.path: s for s in self.sessions}
        rows = []
        for key, tally in self.rows(by):
            row: dict[str, Any] = {by: key}
            if by == "session":
                session = named[key]
                row.update(id=session.session_id, name=session.name, files=session.files,
                           models=session.models)
            rows.append({**row, **tally.to_json()})
        return {"by": by, "rows": rows, "total": self.total.to_json(),
                "repeated": self.repeated.to_json(), "sessions": len(self.sessions),
                "files": sum(len(s.files) for s in self.sessions),
                "unpricedModels": self.unpriced_models,
                "prices": {"path": self.prices.path, "asOf": self.prices.as_of,
                           "source": self.prices.source},
                "warnings": [w.to_json() for w in self.warnings]}


def usage(paths: Iterable[str | os.PathLike[str]], *, prices: PriceTable | None = None,
          progress: Progress | None = None) -> UsageReport:
    """Count the tokens and cost of the sessions at `paths` (files, or folders: their
    sessions as `journal.discovery` finds them), each rotated lineage once. A path that does
    not exist is a warning.

    `prices` defaults to `load_prices()` (the bundled table, or `$JOURNAL_PRICES`).
    `progress` is called with (bytes read, bytes in all) after each file, a Claude Code
    transcript's subagent files included (they are read with it).

    Example:
        >>> report = usage(["sessions/"])  # doctest: +SKIP
        >>> [(model, t.cost) for model, t in report.rows("model")]
    """
    table = prices if prices is not None else load_prices()
    warnings: list[UsageWarning] = []
    present = []
    for given in paths:
        path = os.fspath(given)
        if os.path.lexists(path) or is_database_url(path):
            present.append(path)
        else:
            warnings.append(UsageWarning(path, "no such file or folder"))
    chains = find_lineages(present) if present else []
    total = sum(_size(f) for chain in chains for f in [*chain, *subagents_of(chain)])
    done = 0
    sessions = []
    ledger = _Ledger()
    for chain in chains:
        def step(path: str) -> None:
            nonlocal done
            done += _size(path)
            if progress is not None:
                progress(done, total)
        session = lineage_usage(chain, table, warnings, after_file=step, ledger=ledger)
        if session is not None:
            session.path, session.files = shown(session.path), [shown(f) for f in session.files]
            sessions.append(session)
    named = [UsageWarning(shown(w.path), shown_in(w.message, w.path)) for w in warnings]
    return UsageReport(sessions, named, table)


def lineage_usage(files: Sequence[str], prices: PriceTable,
                  warnings: list[UsageWarning] | None = None, *,
                  after_file: Callable[[str], None] | None = None,
                  ledger: _Ledger | None = None) -> SessionUsage | None:
    """The usage of one logical session, `files` its lineage oldest first (as
    `journal.discovery.find_lineages` gives it): each entry counted once. None when no file
    of it could be read as a session (the reasons are added to `warnings`). `ledger`, shared
    by the sessions of one report, notes in the session's `repeated` the responses another
    session counted too. `after_file` is called with each file once it is read: a Claude
    Code transcript's subagent files, read with it, follow it."""
    warned = warnings if warnings is not None else []
    session = SessionUsage(files[-1], list(files))
    seen: set[str] = set()
    counted = False
    for path in files:
        known = len(session.files)
        counted = _count_file(path, session, seen, prices, warned, ledger) or counted
        if after_file is not None:
            for read in [path, *session.files[known:]]:
                after_file(read)
    return session if counted else None


# counting


def _size(path: str) -> int:
    return stored_size(path)


def _tokens(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return 0
    return int(value)


def _recorded_cost(usage: dict[str, Any]) -> float | None:
    cost = usage.get("cost")
    if not isinstance(cost, dict):
        return None
    total = cost.get("total")
    if isinstance(total, int | float) and not isinstance(total, bool):
        return float(total)
    parts = [cost.get(k) for k in ("input", "output", "cacheRead", "cacheWrite")]
    numbers = [float(p) for p in parts if isinstance(p, int | float) and not isinstance(p, bool)]
    return sum(numbers) if numbers else None


_days: dict[int, str] = {}


def _day(message: dict[str, Any], entry: dict[str, Any]) -> str:
    stamp = message.get("timestamp")
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        number = int(stamp // 86_400_000)
        day = _days.get(number)
        if day is None:
            try:
                day = datetime.fromtimestamp(number * 86_400, UTC).date().isoformat()
            except (OverflowError, OSError, ValueError):
                day = "unknown"
            _days[number] = day
        return day
    iso = entry.get("timestamp")
    if isinstance(iso, str) and len(iso) >= 10 and iso[4] == "-" and iso[7] == "-":
        return iso[:10]
    return "unknown"


@dataclass
class _Responses:
    skipped: set[str]
    """Entries that repeat an API response another entry counts."""
    keys: dict[str, tuple[str, object]]
    """The API response (`message.id`, `requestId`) of each assistant entry that names one."""


class _Copy(NamedTuple):
    """One copy of a response: its tokens in all, its (model, day) cell, its counts, cost
    and how the cost was found."""

    tokens: int
    cell: tuple[str, str]
    counts: tuple[int, int, int, int]
    cost: float
    how: int


class _Ledger:
    """The responses one report counted, across its sessions, so that a response several
    sessions hold (a fork's or a resumed transcript's copied history, a transcript's
    imported session) is in the totals once.

    A response is known by keys: a pi message by its entry's id and times (pi's fork copies
    entries as they are); a Claude Code response by its `message.id` and `requestId` (a
    copy keeps both) and by its entry's id and times as well, which are those of the
    session `journal import` makes of the transcript. The copy with the most tokens counts
    (a copy cut in the middle of a response has its first lines' counts); the others go to
    the `repeated` cells of the session that holds them. Memory: one or two 64-bit hashes
    and one small tuple per response counted (the message itself is not kept); two keys
    share a hash with a chance of about k**2 / 2**65 for k keys."""

    def __init__(self) -> None:
        self._held: dict[int, list[_Copy]] = {}
        """A key's hash -> a box holding the copy that counts, one box for all the keys of
        a response (so a copy known by only one of them finds it)."""

    def note(self, keys: Sequence[object], cell: tuple[str, str],
             counts: tuple[int, int, int, int], cost: float, how: int,
             session: SessionUsage) -> None:
        """Note a response `session` counts, known by `keys`; a copy of one noted before
        (under any of its keys) is `repeated`."""
        digests = [hash(key) for key in keys]
        this = _Copy(sum(counts), cell, counts, cost, how)
        box = next((self._held[d] for d in digests if d in self._held), None)
        first = box is None
        if box is None:
            box = [this]
        for digest in digests:
            self._held.setdefault(digest, box)
        if first:
            return
        repeat = this
        if this.tokens > box[0].tokens:  # this copy counts; the one before is the repeat
            box[0], repeat = this, box[0]
        tally = session.repeated.get(repeat.cell)
        if tally is None:
            tally = session.repeated[repeat.cell] = Tally()
        tally.charge(repeat.counts, repeat.cost, repeat.how)


def _claude_responses(read: ClaudeRead) -> _Responses:
    """Which entries of a Claude Code transcript stand for the same API response (one
    `message.id`): the translator merges a response's lines into one entry, but may show a
    response twice in the tree (a compaction's preserved segment is copied under its anchor,
    its usage zeroed). The entry with the most tokens counts; the others are skipped. Also
    the response each names, by which other transcripts' copies of it are known."""
    best: dict[str, tuple[int, str]] = {}
    others: list[str] = []
    keys: dict[str, tuple[str, object]] = {}
    for entry in read.entries:
        message = entry.get("message")
        if entry.get("type") != "message" or not isinstance(message, dict) \
                or message.get("role") != "assistant":
            continue
        records = read.translator.raw.get(entry["id"]) or []
        api = records[0].get("message") if records else None
        key = api.get("id") if isinstance(api, dict) else None
        if not isinstance(key, str):
            continue
        keys[entry["id"]] = (key, records[0].get("requestId"))
        recorded = message.get("usage")
        tokens = sum(_tokens(recorded.get(k)) for k in ("input", "output", "cacheRead",
                                                         "cacheWrite")
                     ) if isinstance(recorded, dict) else -1
        held = best.get(key)
        if held is None or tokens > held[0]:
            if held is not None:
                others.append(held[1])
            best[key] = (tokens, entry["id"])
        else:
            others.append(entry["id"])
    return _Responses(set(others), keys)


def _count_file(path: str, session: SessionUsage, seen: set[str], prices: PriceTable,
                warnings: list[UsageWarning], ledger: _Ledger | None = None) -> bool:
    """Add the replies of `path` to `session`; False (and a warning) when it is no session."""
    try:
        snap = load(path)
    except JournalError as e:
        said = str(e).removeprefix(f"{path}: ")  # the warning names the path already
        warnings.append(UsageWarning(path, f"not counted: {said}"))
        return False
    if snap.header is None and not snap.entries:
        warnings.append(UsageWarning(path, "not counted: not a session file "
                                     "(no session header, no entries)"))
        return False
    if snap.diagnostics:
        warnings.append(UsageWarning(path, f"{len(snap.diagnostics)} unreadable line(s) not "
                                     f"counted; run 'journal repair {path}'"))
    if snap.session_id is not None:
        session.session_id = snap.session_id  # the live file's id, the last read
    if snap.claude is not None:  # a Claude Code transcript: its id and title are records'
        sid, title = snap.claude.first("sessionId"), snap.claude.title
        session.session_id = sid if isinstance(sid, str) else session.session_id
        session.name = title if isinstance(title, str) and title else session.name
        session.files.extend(f for f in snap.claude.subagent_files if f not in session.files)
    cells = session.cells
    responses = _claude_responses(snap.claude) if snap.claude is not None else None
    for entry in snap.entries:
        entry_id = entry.get("id")
        if isinstance(entry_id, str):
            if entry_id in seen:
                continue
            seen.add(entry_id)
            if responses is not None and entry_id in responses.skipped:
                continue
            if kept_copy_of(entry_id) in seen:  # an imported transcript's kept segment,
                continue                        # shown again: skipped as the transcript's
        kind = entry.get("type")
        if kind == "session_info":
            name = entry.get("name")
            session.name = name if isinstance(name, str) and name else session.name
            continue
        message = entry.get("message") if kind == "message" else None
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        recorded = message.get("usage")
        if not isinstance(recorded, dict):
            continue
        model = message.get("model")
        model = model if isinstance(model, str) and model else "unknown"
        key = (model, _day(message, entry))
        tally = cells.get(key)
        if tally is None:
            tally = cells[key] = Tally()
        counts = (_tokens(recorded.get("input")), _tokens(recorded.get("output")),
                  _tokens(recorded.get("cacheRead")), _tokens(recorded.get("cacheWrite")))
        cost = _recorded_cost(recorded)
        how = RECORDED
        if cost is None or (cost <= 0 and any(counts)):
            price = prices.price_for(model)
            if price is None:  # no cost recorded (or a zero one), and no price to compute it
                cost, how = 0.0, UNPRICED
                session.unpriced_models.add(model)
            else:
                cost, how = price.cost(*counts), COMPUTED
        tally.charge(counts, cost, how)
        if ledger is not None and isinstance(entry_id, str):
            # pi's fork and `journal import` copy the entry with its id and times
            keys: list[object] = [("pi", entry_id, entry.get("timestamp"),
                                   message.get("timestamp"))]
            response = responses.keys.get(entry_id) if responses is not None else None
            if response is not None:
                keys.append(response)
            ledger.note(keys, key, counts, cost, how, session)
    return True
