"""Read-time sanitizer that makes tool calls and tool results pair up before a model sees them.

The Anthropic Messages API accepts a history only when every `tool_use` in an assistant message
is answered by a `tool_result` in the user message right after it, each result names a call of
that assistant message, no message is empty (the final assistant message, which may be a
prefill, excepted) and no text block is blank. pi turns a run of consecutive `toolResult`
messages into that one user message, so in pi's shape the rules read: the results of an
assistant message come right after it, before any other message. A session log can break this
in many ways (a crash between a call and its result, a user typing while a tool runs, a provider
reusing ids, an aborted stream that left a half-written call), and the log is never edited, so
the repair happens here, on the projection, every time it is read.

`sanitize(messages)` returns a repaired copy and a `PairingReport`. It is pure (the input is
never mutated; messages it leaves alone are returned as the same objects, and anything it
changes is a new dict), deterministic, and idempotent: its output is valid for
`journal.validate.pairing_problems`, and sanitizing a valid history changes nothing.

The rules, each named as it appears in the report:

- `non_executable_call`: a `toolCall` block without a non-empty string id, without a non-empty
  string name, or whose arguments are missing or not an object could never have run; it is left
  out of the copy. `non_executable_result`: a result whose id only names such a call is dropped.
- `unexecuted_call`: in an assistant message that ended with `stopReason` "error" or "aborted",
  a call that has no result was never executed; it is left out rather than answered.
- `missing_result`: any other call without a result is answered by a synthetic error result
  (see `synthetic_result`): the call was interrupted before its result was recorded.
- `moved_result`: the results of an assistant message are placed right after it, one per call,
  in the order of the calls. A result found further on (after a user message, another
  assistant message, or out of order) is moved back to its slot. A result claims, in this
  order, an unanswered call with its id in the latest assistant message that has calls, or else
  the one earlier call that carries its id, provided no other call before the result used that
  id.
- `orphan_result`: a result whose id matches no call before it (or matches several, so its owner
  cannot be told) is dropped, and so is a result without an id.
- `duplicate_result`: a second result for a call that is already answered is dropped. A recorded
  result wins over a synthetic one written earlier by a repair, so a late real result replaces
  the placeholder.
- `duplicate_call_id`: tool call ids must be unique across the history. The first call with an
  id keeps it; a later one is renamed `<id>_dup2`, `<id>_dup3`, ... (skipping names already in
  use), and its result is renamed with it.
- `empty_text_block`: text blocks that are empty or only whitespace are removed from user,
  custom, assistant and tool-result content (a blank string content counts as one such block).
- `empty_message`: a user, custom or assistant message left with no content is dropped, except
  the final message of the history when it is an assistant message (a prefill may be empty).
  A tool result may be left with empty content: it still answers its call.
- `thinking_dropped`: thinking blocks are never edited. When an assistant message that holds
  signed thinking (a thinking block with a non-empty `thinkingSignature`, or a redacted
  thinking block) has to change for any rule above, its thinking blocks are removed as a whole,
  because a provider rejects a signed turn whose content was altered around its signature.
  The latest assistant message is exempt: its thinking blocks are always kept as they are, even
  when its other blocks change, since the API requires them verbatim for the turn in progress.
  When the latest assistant message would be left empty (say an aborted stream that produced
  nothing), the last assistant message before it that keeps some content is exempt too, as it
  is the latest turn the model will see.
- `not_a_message`: an item of the list that is not a dict is dropped.

Messages of other roles (`bashExecution`, `custom`, `compactionSummary`, `branchSummary`, and
unknown ones) are kept where they are; like user messages, they end a run of tool results.

Notes and damage (`classify`): some of these states are written by pi itself and handled by pi
every time it sends a request, so a file holding them is not damaged. pi's request path
(pi-ai's `transformMessages`, then the Anthropic provider's message conversion) skips an
assistant message that ended with `stopReason` "error" or "aborted" as a whole, answers every
call left without a result with an error result ("No result provided") as soon as the next
assistant or user message comes (pi turns every other role into a user message first, and a
request always ends with a new one), drops blank text blocks from user and assistant content,
and drops user and assistant messages left with no content. So `unexecuted_call`,
`missing_result`, `empty_text_block`, `empty_message`, a `non_executable_call` in a failed turn,
and a `thinking_dropped` that only follows those are *notes*. Everything else (an orphan,
duplicate or displaced result, a reused call id, a call pi would send without an id or name)
is *damage*: the request fails even after pi's own handling. `is_note` is the one table of
which fix is a note; `sanitize(messages, damage_only=True)` makes only the other fixes (what
repair writes into a file without `--strict`), so its output holds the same notes as its input
and no damage.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .model import Message

NON_EXECUTABLE_CALL = "non_executable_call"
NON_EXECUTABLE_RESULT = "non_executable_result"
UNEXECUTED_CALL = "unexecuted_call"
MISSING_RESULT = "missing_result"
MOVED_RESULT = "moved_result"
ORPHAN_RESULT = "orphan_result"
DUPLICATE_RESULT = "duplicate_result"
DUPLICATE_CALL_ID = "duplicate_call_id"
EMPTY_TEXT_BLOCK = "empty_text_block"
EMPTY_MESSAGE = "empty_message"
THINKING_DROPPED = "thinking_dropped"
NOT_A_MESSAGE = "not_a_message"

RULES = (
    NON_EXECUTABLE_CALL,
    NON_EXECUTABLE_RESULT,
    UNEXECUTED_CALL,
    MISSING_RESULT,
    MOVED_RESULT,
    ORPHAN_RESULT,
    DUPLICATE_RESULT,
    DUPLICATE_CALL_ID,
    EMPTY_TEXT_BLOCK,
    EMPTY_MESSAGE,
    THINKING_DROPPED,
    NOT_A_MESSAGE,
)

CLIENT_HANDLED = frozenset({UNEXECUTED_CALL, MISSING_RESULT, EMPTY_TEXT_BLOCK, EMPTY_MESSAGE})
"""Rules whose states pi fixes itself when it sends a request (see "Notes and damage")."""

INTERRUPTED_TEXT = "Tool call was interrupted before a result was recorded."
SYNTHETIC_REASON = "missing_result"

# Tuples, not sets: membership by equality, so an unhashable value read from a file (a list
# where a role should be) is simply not a member instead of raising TypeError.
_FAILED_STOPS = ("error", "aborted")
_THINKING_TYPES = ("thinking", "redactedThinking", "redacted_thinking")
_TEXT_CONTENT_ROLES = ("user", "custom")


@dataclass(frozen=True)
class Fix:
    """One change made by `sanitize`.

    `index` is the position in the input list of the message concerned (for a synthetic
    result, the assistant message whose call it answers); `call_id` is the tool call id
    involved, if any, as it was in the input.
    """

    rule: str
    index: int
    call_id: str | None = None
    detail: str = ""


@dataclass
class PairingReport:
    """What `sanitize` changed: the fixes in input order, a count per rule, and whether the
    output differs from the input."""

    fixes: list[Fix] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    changed: bool = False


def classify(messages: list[Message], report: PairingReport) -> tuple[list[Fix], list[Fix]]:
    """Split the fixes of `sanitize(messages)` into notes and damage.

    Args:
        messages: the list that was given to `sanitize`.
        report: what `sanitize` returned for it.

    Returns:
        `(notes, damage)`, each in the report's order. A note is a state pi handles itself at
        request time; damage would make the request fail even after that.

    Example:
        >>> call = {"type": "toolCall", "id": "t1", "name": "ls", "arguments": {}}
        >>> history = [{"role": "user", "content": "go"},
        ...            {"role": "assistant", "content": [call], "stopReason": "aborted"},
        ...            {"role": "user", "content": "again"}]
        >>> notes, damage = classify(history, sanitize(history)[1])
        >>> [f.rule for f in notes], damage
        (['unexecuted_call', 'empty_message'], [])
    """
    damaged_at: set[int] = set()
    kinds: list[bool] = []  # True for a note
    for fix in report.fixes:
        note = is_note(fix.rule, messages, fix.index)
        kinds.append(note)
        if not note and fix.rule != THINKING_DROPPED:
            damaged_at.add(fix.index)
    notes: list[Fix] = []
    damage: list[Fix] = []
    for fix, note in zip(report.fixes, kinds, strict=True):
        if fix.rule == THINKING_DROPPED:
            note = fix.index not in damaged_at
        (notes if note else damage).append(fix)
    return notes, damage


def is_note(rule: str, messages: list[Message], index: int) -> bool:
    """True when a fix by `rule` of `messages[index]` is a note: a state pi handles itself.

    The one table of notes, used by `classify` and by `sanitize(..., damage_only=True)`.
    `thinking_dropped` is not decided here: it follows the other fixes of its message (a note
    when they all are, see `classify`).
    """
    return rule in CLIENT_HANDLED or (
        rule == NON_EXECUTABLE_CALL and _failed_turn(messages, index))


def _failed_turn(messages: list[Message], index: int) -> bool:
    message = messages[index] if 0 <= index < len(messages) else None
    return (isinstance(message, dict) and message.get("role") == "assistant"
            and message.get("stopReason") in _FAILED_STOPS)


def synthetic_result(call: Message, timestamp: Any) -> Message:
    """The error result that stands in for a call whose result was never recorded.

    Args:
        call: the `toolCall` block (its `id` and `name` are used).
        timestamp: the timestamp to give the result, normally the assistant message's.

    Returns:
        A new pi `toolResult` message with `isError` true and `details` marking it synthetic.

    Example:
        >>> r = synthetic_result({"type": "toolCall", "id": "t1", "name": "ls"}, 5)
        >>> r["toolCallId"], r["isError"], r["details"]["synthetic"]
        ('t1', True, True)
    """
    name = call.get("name")
    return {
        "role": "toolResult",
        "toolCallId": call.get("id"),
        "toolName": name if isinstance(name, str) and name else "unknown",
        "content": [{"type": "text", "text": INTERRUPTED_TEXT}],
        "isError": True,
        "details": {"synthetic": True, "reason": SYNTHETIC_REASON},
        "timestamp": timestamp,
    }


def is_synthetic_result(message: Any) -> bool:
    """True for a tool result made by `synthetic_result` (or materialized from one)."""
    if not isinstance(message, dict) or message.get("role") != "toolResult":
        return False
    details = message.get("details")
    return isinstance(details, dict) and details.get("synthetic") is True


def non_executable_reason(block: Message) -> str | None:
    """Why a `toolCall` block could not have been executed, or None when it could."""
    call_id = block.get("id")
    if not isinstance(call_id, str) or not call_id.strip():
        return "no id"
    name = block.get("name")
    if not isinstance(name, str) or not name.strip():
        return "no name"
    if not isinstance(block.get("arguments"), dict):
        return "arguments missing or not an object"
    return None


def _is_tool_call(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "toolCall"


def _is_blank_text(block: Any) -> bool:
    if not isinstance(block, dict) or block.get("type") != "text":
        return False
    text = block.get("text")
    return not isinstance(text, str) or not text.strip()


def _is_signed_thinking(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if kind in ("redactedThinking", "redacted_thinking"):
        return True
    if kind != "thinking":
        return False
    signature = block.get("thinkingSignature")
    return block.get("redacted") is True or (isinstance(signature, str) and bool(signature))


@dataclass(eq=False)
class _Call:
    index: int  # of the assistant message in the input
    pos: int  # of the block in its content
    block: Message
    failed: bool
    id: str = ""
    result: Message | None = None
    result_index: int = -1
    out_id: str = ""


class _Fixes:
    """The fixes made so far, and which ones to leave undone (`damage_only`: the notes)."""

    def __init__(self, messages: list[Message], damage_only: bool = False) -> None:
        self.items: list[Fix] = []
        self.messages = messages
        self.damage_only = damage_only

    def add(self, rule: str, index: int, call_id: Any = None, detail: str = "") -> None:
        self.items.append(Fix(rule, index, call_id if isinstance(call_id, str) else None, detail))

    def leaves(self, rule: str, index: int) -> bool:
        """True when the state `rule` would fix in `messages[index]` stays as it is."""
        return self.damage_only and is_note(rule, self.messages, index)


def sanitize(messages: list[Message], *,
             damage_only: bool = False) -> tuple[list[Message], PairingReport]:
    """Return a copy of `messages` that satisfies the pairing rules, and what was changed.

    Args:
        messages: pi-shaped messages, oldest first (as projected from a session).
        damage_only: fix the damage only and leave every note as it is (`is_note`: an
            aborted turn's calls stay, a missing result stays missing, a blank block or an
            empty message stays). What repair writes without `--strict`; the output then holds
            the same notes and no damage (`classify`), and the read-time call (without this
            flag) still makes it valid.

    Returns:
        `(sanitized, report)`. `sanitized` has no pairing problem (with `damage_only`, none
        but notes); `report.fixes` lists each change with the index of the input message it
        concerns.

    Example:
        >>> call = {"type": "toolCall", "id": "t1", "name": "ls", "arguments": {}}
        >>> out, report = sanitize([
        ...     {"role": "user", "content": "go"},
        ...     {"role": "assistant", "content": [call], "stopReason": "toolUse", "timestamp": 1},
        ...     {"role": "user", "content": "still there?"},
        ... ])
        >>> [m["role"] for m in out], report.counts
        (['user', 'assistant', 'toolResult', 'user'], {'missing_result': 1})
    """
    fixes = _Fixes(messages, damage_only)
    calls, by_position = _claim_results(messages, fixes)
    kept = _settle_unanswered(calls, fixes)
    _rename_duplicates(kept, fixes)
    latest = _latest_assistants(messages, by_position)
    kept_by_message: dict[int, list[_Call]] = {}
    for call in kept:
        kept_by_message.setdefault(call.index, []).append(call)

    built: list[tuple[Message, int, bool]] = []  # (message, input index, is empty)
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "toolResult":
            continue
        if role == "assistant":
            new, empty = _clean_assistant(i, message, by_position, i in latest, fixes)
            built.append((new, i, empty))
            own = kept_by_message.get(i)
            if own:
                _flag_moved(i, own, messages, fixes)
                built.extend((r, i, False) for r in _results_for(message, own, fixes))
        elif role in _TEXT_CONTENT_ROLES:
            new, empty = _clean_text_content(i, message, fixes)
            built.append((new, i, empty))
        else:
            built.append((message, i, False))

    out = _drop_empty(built, fixes)
    fixes.items.sort(key=lambda f: f.index)
    counts = dict(Counter(f.rule for f in fixes.items))
    changed = len(out) != len(messages) or any(
        a is not b for a, b in zip(out, messages, strict=True)
    )
    return out, PairingReport(fixes.items, counts, changed)


def _claim_results(
    messages: list[Message], fixes: _Fixes
) -> tuple[list[_Call], dict[tuple[int, int], _Call | None]]:
    """Walk the history once: collect executable calls and give each result to its call."""
    calls: list[_Call] = []
    by_position: dict[tuple[int, int], _Call | None] = {}
    frame: list[_Call] = []  # calls of the latest assistant message that has any
    uses: dict[str, list[_Call | None]] = {}  # every call id seen so far; None = not executable

    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            fixes.add(NOT_A_MESSAGE, i, detail=type(message).__name__)
            continue
        role = message.get("role")
        if role == "assistant":
            content = message.get("content")
            own: list[_Call] = []
            failed = message.get("stopReason") in _FAILED_STOPS
            for pos, block in enumerate(content if isinstance(content, list) else ()):
                if not _is_tool_call(block):
                    continue
                reason = non_executable_reason(block)
                call_id = block.get("id")
                if reason is not None:
                    by_position[(i, pos)] = None
                    if not fixes.leaves(NON_EXECUTABLE_CALL, i):
                        fixes.add(NON_EXECUTABLE_CALL, i, call_id, reason)
                    if isinstance(call_id, str) and call_id:
                        uses.setdefault(call_id, []).append(None)
                    continue
                call = _Call(i, pos, block, failed, call_id)
                by_position[(i, pos)] = call
                own.append(call)
                uses.setdefault(call.id, []).append(call)
            if own:
                frame = own
                calls.extend(own)
        elif role == "toolResult":
            _claim_one(i, message, frame, uses, fixes)
    return calls, by_position


def _claim_one(
    i: int,
    result: Message,
    frame: list[_Call],
    uses: dict[str, list[_Call | None]],
    fixes: _Fixes,
) -> None:
    rid = result.get("toolCallId")
    if not isinstance(rid, str) or not rid:
        fixes.add(ORPHAN_RESULT, i, detail="result has no toolCallId")
        return
    synthetic = is_synthetic_result(result)
    mine = [c for c in frame if c.id == rid]
    if mine:
        target = next((c for c in mine if c.result is None), None)
        if target is None and not synthetic:
            target = next((c for c in mine if is_synthetic_result(c.result)), None)
        if target is None:
            fixes.add(DUPLICATE_RESULT, i, rid, "call already answered")
        else:
            _give(target, i, result, fixes)
        return
    earlier = uses.get(rid, [])
    if len(earlier) == 1:
        only = earlier[0]
        if only is None:
            fixes.add(NON_EXECUTABLE_RESULT, i, rid, "its call was not executable")
        elif only.result is None or (is_synthetic_result(only.result) and not synthetic):
            _give(only, i, result, fixes)
        else:
            fixes.add(DUPLICATE_RESULT, i, rid, "call already answered")
    elif not earlier:
        fixes.add(ORPHAN_RESULT, i, rid, "no call with this id before it")
    elif all(c is not None and c.result is not None for c in earlier):
        fixes.add(DUPLICATE_RESULT, i, rid, "every call with this id is answered")
    elif all(c is None for c in earlier):
        fixes.add(NON_EXECUTABLE_RESULT, i, rid, "its call was not executable")
    else:
        fixes.add(ORPHAN_RESULT, i, rid, f"{len(earlier)} earlier calls share this id")


def _give(call: _Call, i: int, result: Message, fixes: _Fixes) -> None:
    if call.result is not None:
        fixes.add(DUPLICATE_RESULT, call.result_index, call.id,
                  "synthetic result replaced by a recorded one")
    call.result = result
    call.result_index = i


def _settle_unanswered(calls: list[_Call], fixes: _Fixes) -> list[_Call]:
    """Drop unanswered calls of failed turns (or, with `damage_only`, leave them where they are,
    unanswered); the rest will get a synthetic result."""
    kept = []
    for call in calls:
        if call.result is None and call.failed:
            if not fixes.leaves(UNEXECUTED_CALL, call.index):
                fixes.add(UNEXECUTED_CALL, call.index, call.id, "turn failed before it ran")
            continue
        kept.append(call)
    return kept


def _rename_duplicates(kept: list[_Call], fixes: _Fixes) -> None:
    in_use = {c.id for c in kept}
    given: set[str] = set()
    for call in kept:
        new_id = call.id
        if new_id in given:
            n = 2
            while f"{call.id}_dup{n}" in in_use or f"{call.id}_dup{n}" in given:
                n += 1
            new_id = f"{call.id}_dup{n}"
            fixes.add(DUPLICATE_CALL_ID, call.index, call.id, f"renamed to {new_id}")
        call.out_id = new_id
        given.add(new_id)


def _latest_assistants(
    messages: list[Message], by_position: dict[tuple[int, int], _Call | None]
) -> set[int]:
    """The last assistant message, and the last one that keeps content if that one does not."""
    latest: set[int] = set()
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, dict) and m.get("role") == "assistant":
            latest.add(i)
            # the latest turn the model is sent: what a full sanitize leaves, in either mode
            _, empty = _clean_assistant(i, m, by_position, True, _Fixes(messages))
            if not empty:
                break
    return latest


def _clean_assistant(
    i: int,
    message: Message,
    by_position: dict[tuple[int, int], _Call | None],
    is_latest: bool,
    fixes: _Fixes,
) -> tuple[Message, bool]:
    content = message.get("content")
    if isinstance(content, str):
        if content.strip():
            return message, False
        if fixes.leaves(EMPTY_TEXT_BLOCK, i):
            return message, True
        fixes.add(EMPTY_TEXT_BLOCK, i, detail="blank string content")
        return {**message, "content": []}, True
    if not isinstance(content, list):
        return message, True

    blocks: list[Any] = []
    changed = False
    for pos, block in enumerate(content):
        if _is_tool_call(block):
            call = by_position.get((i, pos))
            if call is None and fixes.leaves(NON_EXECUTABLE_CALL, i):
                pass
            elif call is not None and not call.out_id and fixes.leaves(UNEXECUTED_CALL, i):
                pass
            elif call is None or not call.out_id:
                changed = True  # not executable, or never ran in a failed turn
                continue
            elif call.out_id != call.id:
                block = {**block, "id": call.out_id}
                changed = True
        elif _is_blank_text(block) and not fixes.leaves(EMPTY_TEXT_BLOCK, i):
            fixes.add(EMPTY_TEXT_BLOCK, i)
            changed = True
            continue
        blocks.append(block)
    if not changed:
        return message, not content
    if not is_latest and any(_is_signed_thinking(b) for b in blocks):
        kept = [b for b in blocks if not (isinstance(b, dict) and b.get("type") in _THINKING_TYPES)]
        dropped = len(blocks) - len(kept)
        blocks = kept
        fixes.add(THINKING_DROPPED, i, detail=f"{dropped} thinking block(s) of a changed turn")
    return {**message, "content": blocks}, not blocks


def _clean_text_content(i: int, message: Message, fixes: _Fixes) -> tuple[Message, bool]:
    content = message.get("content")
    if isinstance(content, str):
        return message, not content.strip()
    if not isinstance(content, list):
        return message, True
    blocks = [b for b in content if not _is_blank_text(b)]
    if len(blocks) == len(content) or fixes.leaves(EMPTY_TEXT_BLOCK, i):
        return message, not blocks
    for _ in range(len(content) - len(blocks)):
        fixes.add(EMPTY_TEXT_BLOCK, i)
    return {**message, "content": blocks}, not blocks


def _clean_result(result: Message, index: int, out_id: str, fixes: _Fixes) -> Message:
    content = result.get("content")
    new_content = content
    if fixes.leaves(EMPTY_TEXT_BLOCK, index):
        pass
    elif isinstance(content, str) and not content.strip():
        new_content = []
        fixes.add(EMPTY_TEXT_BLOCK, index, result.get("toolCallId"), "blank string content")
    elif isinstance(content, list):
        blocks = [b for b in content if not _is_blank_text(b)]
        for _ in range(len(content) - len(blocks)):
            fixes.add(EMPTY_TEXT_BLOCK, index, result.get("toolCallId"))
        if len(blocks) != len(content):
            new_content = blocks
    if new_content is content and result.get("toolCallId") == out_id:
        return result
    return {**result, "toolCallId": out_id, "content": new_content}


def _results_for(assistant: Message, own: list[_Call], fixes: _Fixes) -> list[Message]:
    results = []
    for call in own:
        if call.result is None and fixes.leaves(MISSING_RESULT, call.index):
            continue
        if call.result is None:
            block = {**call.block, "id": call.out_id}
            fixes.add(MISSING_RESULT, call.index, call.id, "synthetic error result added")
            results.append(synthetic_result(block, assistant.get("timestamp")))
        else:
            results.append(_clean_result(call.result, call.result_index, call.out_id, fixes))
    return results


def _flag_moved(i: int, own: list[_Call], messages: list[Message], fixes: _Fixes) -> None:
    """Report the answered calls whose result was not already in its slot."""
    end = i + 1
    while (end < len(messages) and isinstance(messages[end], dict)
           and messages[end].get("role") == "toolResult"):
        end += 1
    answered = [c for c in own if c.result is not None]
    in_run = [c for c in answered if i < c.result_index < end]
    by_position = sorted(in_run, key=lambda c: c.result_index)
    in_place = {id(c) for c, found in zip(in_run, by_position, strict=True) if c is found}
    for call in answered:
        if id(call) not in in_place:
            fixes.add(MOVED_RESULT, call.result_index, call.id,
                      f"moved to follow the assistant message at {i}")


def _drop_empty(built: list[tuple[Message, int, bool]], fixes: _Fixes) -> list[Message]:
    """Drop empty messages; an empty assistant message that ends the history stays."""
    final = -1
    for k in range(len(built) - 1, -1, -1):
        message, _, empty = built[k]
        if not empty or message.get("role") == "assistant":
            final = k if empty else -1
            break
    out = []
    for k, (message, index, empty) in enumerate(built):
        if empty and k != final and not fixes.leaves(EMPTY_MESSAGE, index):
            fixes.add(EMPTY_MESSAGE, index, detail=f"{message.get('role')} message with no content")
            continue
        out.append(message)
    return out
