"""Tool pairing on the chain Claude Code resumes, repaired in the transcript itself.

The chain runs from the leaf (the last main-chain user or assistant record; in a subagent's
file, the last one of any chain) up its parents to the first record with none (the latest
compact boundary, or the start). Its messages are read as `journal.claude`'s projection
reads them (a second reading of its rules, checked against it by the hypothesis damage test):

- the lines of one API response (one `message.id`, each hanging on an earlier line, directly
  or through a hook's `progress` record, on the chain or beside it) make one assistant
  message;
- a user record gives a tool result per `tool_result` block, then a user message for anything
  else;
- records of tool results only that hang on a line of the response (or on one of its
  results) join its run, right after it, when they were written before the conversation went
  on from the response (what goes on from a progress record on the response counts as going
  on after all of its results); results written later, or hanging on a progress record, stay
  beside the chain.

The results of an assistant message's calls must come right after it, as one run, each call
answered once.

- `bad_tool_use`: a tool_use block without a string id, a name or an input object (a
  damaged line) is removed, and its result goes as an orphan;
- `empty_text_block`: a text block without a text, or with only blank text (a damaged
  `"text"` key; the API refuses it) is removed, a line left with no content going as
  `empty_message` does;
- `empty_message`: a user record with nothing to send, or a response with no content that
  does not end the history (the API refuses both), goes, its children re-attached to its
  parent;
- `orphan_result`, `duplicate_result`: a block answering no call of the message before its
  run, or one already answered, is removed (a record left empty goes, its children
  re-attached to its parent);
- `unpaired_tool_use`: calls with no result in the run get the interrupted-tool record Claude
  Code writes itself (`journal.claude.synthetic`), placed right after the calls; the record
  that followed them is re-parented onto it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .mendrecs import MendPlan, Rec
from .synthetic import interrupted_result

ORPHAN_RESULT = "orphan_result"
DUPLICATE_RESULT = "duplicate_result"
UNPAIRED_TOOL_USE = "unpaired_tool_use"
EMPTY_MESSAGE = "empty_message"
BAD_TOOL_USE = "bad_tool_use"
EMPTY_TEXT_BLOCK = "empty_text_block"
REPARENTED = "reparented"
_MESSAGE_TYPES = ("user", "assistant")


@dataclass
class _Msg:
    kind: str
    """"assistant", "results" (a user record's tool results) or "user" (the rest of it)."""
    recs: list[Rec]
    message_id: Any = None
    beside: list[Rec] = field(default_factory=list)
    """Lines of the same response that hang beside the chain (the projection merges them)."""

    def lines(self) -> list[Rec]:
        return self.recs + self.beside


def active_chain(records: list[Rec]) -> list[Rec]:
    """The records Claude Code resumes, root first (see the module docstring)."""
    by_uuid: dict[str, Rec] = {}
    leaf = side_leaf = None
    for rec in records:
        key = rec.uuid
        if key is None:
            continue
        by_uuid.setdefault(key, rec)
        if rec.value.get("type") in _MESSAGE_TYPES:
            if rec.value.get("isSidechain") is True:
                side_leaf = rec
            else:
                leaf = rec
    current = leaf or side_leaf
    chain: list[Rec] = []
    visited: set[str] = set()
    while current is not None:
        chain.append(current)
        visited.add(current.uuid or "")
        parent = current.parent
        if not isinstance(parent, str) or parent in visited:
            break
        current = by_uuid.get(parent)
    chain.reverse()
    return chain


def _blocks(rec: Rec) -> list[Any]:
    message = rec.value.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _result_ids(rec: Rec) -> list[Any]:
    return [b.get("tool_use_id") for b in _blocks(rec)
            if isinstance(b, dict) and b.get("type") == "tool_result"]


def _tool_ids(recs: list[Rec]) -> list[str]:
    return [b["id"] for rec in recs for b in _blocks(rec)
            if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str)]


def _is_message(rec: Rec) -> bool:
    return rec.value.get("type") in _MESSAGE_TYPES and isinstance(rec.value.get("message"), dict)


def _only_results(rec: Rec) -> bool:
    blocks = _blocks(rec)
    return bool(blocks) and rec.value.get("type") == "user" and all(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks)


def _messages(chain: list[Rec], records: list[Rec]) -> list[_Msg]:
    on_chain = {id(r) for r in chain}
    # records of tool results only, beside the chain: the projection gathers those hanging
    # on a line of a response (or on one of its gathered results) right after the response
    order = {id(r): n for n, r in enumerate(records)}
    results_on: dict[str, list[Rec]] = {}
    lines_on: dict[str, list[Rec]] = {}  # assistant lines and hooks' progress records
    for rec in records:
        parent = rec.parent
        if id(rec) in on_chain or not isinstance(parent, str) or rec.uuid is None:
            continue  # (a record without a uuid is no part of the conversation)
        if _only_results(rec):
            results_on.setdefault(parent, []).append(rec)
        elif ((rec.value.get("type") == "assistant" and _is_message(rec))
              or rec.value.get("type") == "progress"):
            lines_on.setdefault(parent, []).append(rec)
    out: list[_Msg] = []
    members: set[str] = set()  # the current response's lines, its progress and its results

    via: set[str] = set()  # the members that are hooks' progress records

    def below(index: dict[str, list[Rec]], keep: Any, limit: int,
              start: set[str] | None = None) -> list[Rec]:
        """What hangs on the members (and on what it gathers), before `limit`, in file order."""
        found: list[Rec] = []
        todo = list(members if start is None else start)
        while todo:
            for rec in index.get(todo.pop(), ()):
                key = rec.uuid or ""
                if key not in members and order[id(rec)] < limit and keep(rec):
                    members.add(key)
                    found.append(rec)
                    todo.append(key)
        if len(found) > 1:
            found.sort(key=lambda r: order[id(r)])
        return found

    response: _Msg | None = None

    def flush(limit: int) -> None:
        """End the current response: gather its lines and results beside the chain. Results
        written after the chain went on (`limit`, the file position of the record that hangs
        after the response) hang beside it for the projection too, and are not gathered."""
        if not members or response is None:
            return
        if any(m in results_on or m in lines_on for m in members):
            # lines of the response beside the chain, directly or through a hook's progress
            # record (the projection merges them; results on a progress record stay beside)
            found = below(lines_on, lambda r: r.value.get("type") == "progress" or
                          r.value["message"].get("id") == response.message_id, len(order),
                          {r.uuid or "" for r in response.recs} | via)
            response.beside.extend(r for r in found if r.value.get("type") == "assistant")
            via.update(r.uuid or "" for r in found if r.value.get("type") == "progress")
            # a result on a progress record does not join the run (it hangs beside it)
            out.extend(_Msg("results", [r]) for r in below(results_on, lambda r: True, limit,
                                                           members - via))
        members.clear()
        via.clear()

    def same_response(rec: Rec | None, parents: set[str]) -> bool:
        return (rec is not None and response is not None and response.message_id is not None
                and rec.value.get("type") == "assistant" and _is_message(rec)
                and rec.parent in parents
                and rec.value["message"].get("id") == response.message_id)

    for rec in chain:
        kind = rec.value.get("type")
        if members and rec.parent in members:
            if same_response(rec, members):
                assert response is not None
                response.recs.append(rec)  # the next line of the same response
                members.add(rec.uuid or "")
                continue
            if kind == "progress":
                # a hook's progress on the response: what goes on from it hangs after the
                # response's results (the projection's rule), so it ends nothing
                members.add(rec.uuid or "")
                via.add(rec.uuid or "")
                continue
            if _only_results(rec):
                members.add(rec.uuid or "")  # a result of the run, on the chain
        if members and rec.uuid not in members:
            flush(order[id(rec)])
        if not _is_message(rec):
            continue
        if kind == "assistant":
            flush(order[id(rec)])
            response = _Msg("assistant", [rec], rec.value["message"].get("id"))
            out.append(response)
            members.add(rec.uuid or "")
            continue
        blocks = rec.value["message"].get("content")
        results = _result_ids(rec)
        if results:
            out.append(_Msg("results", [rec]))
        if not results or (isinstance(blocks, list) and len(results) < len(blocks)):
            out.append(_Msg("user", [rec]))
    flush(len(order))
    return out


def fix_pairing(p: MendPlan) -> None:
    """Repair the pairing of the resumed chain (see the module docstring)."""
    for _ in range(len(p.records) + 1):  # each pass that changes something removes a block
        if not _remove_bad_results(p):
            break
    _answer_open_calls(p)


def _remove_bad_results(p: MendPlan) -> bool:
    records = p.kept()
    answered: set[Any] = set()
    expected: set[str] = set()
    got: set[Any] = set()
    bad: dict[int, tuple[Rec, list[tuple[str, Any]]]] = {}
    empty: list[Rec] = []
    broken: list[tuple[Rec, list[Any]]] = []
    blank: list[tuple[Rec, list[Any]]] = []
    messages = _messages(active_chain(records), records)
    for index, msg in enumerate(messages):
        if msg.kind == "assistant":
            if index < len(messages) - 1 and not any(_has_content(r) for r in msg.lines()):
                empty.extend(msg.lines())  # an empty response that does not end the history
                continue
            expected, got = set(_tool_ids(msg.lines())), set()
            for line in msg.lines():
                calls = [b for b in _blocks(line) if isinstance(b, dict)
                         and b.get("type") == "tool_use" and not _well_formed(b)]
                if calls:
                    broken.append((line, calls))
                texts = _blank_texts(line)
                if texts:
                    blank.append((line, texts))
            continue
        if msg.kind == "user":
            expected, got = set(), set()
            if _is_empty(msg.recs[0]):
                empty.append(msg.recs[0])
            elif texts := _blank_texts(msg.recs[0]):
                blank.append((msg.recs[0], texts))
            continue
        rec = msg.recs[0]
        for tool_id in _result_ids(rec):
            if tool_id in expected and tool_id not in got:
                got.add(tool_id)
                answered.add(tool_id)
                continue
            kind = DUPLICATE_RESULT if tool_id in got or tool_id in answered else ORPHAN_RESULT
            bad.setdefault(id(rec), (rec, []))[1].append((kind, tool_id))
    gone = [(rec, found[0][0]) for rec, found in bad.values() if not _drop_blocks(p, rec, found)]
    for kind, found in ((BAD_TOOL_USE, broken), (EMPTY_TEXT_BLOCK, blank)):
        for rec, blocks in found:
            if kind == BAD_TOOL_USE:
                p.problem(kind, "removed the tool_use block", rec, detail=f"{len(blocks)} "
                          "call(s) without a string id, a name or an input object")
            else:
                p.problem(kind, "removed the text block", rec, detail=f"{len(blocks)} text "
                          "block(s) without a text or with blank text (the API refuses them)")
            keep = [b for b in _blocks(rec) if not any(b is c for c in blocks)]
            if keep:
                value = rec.edit(rec.reason or kind)
                value["message"] = {**value["message"], "content": keep}
            else:
                gone.append((rec, kind))
    for rec in empty:
        p.problem(EMPTY_MESSAGE, "quarantined the record", rec,
                  detail=f"{'an assistant' if rec.value.get('type') == 'assistant' else 'a user'}"
                         " message with no content (the API refuses it)")
        gone.append((rec, EMPTY_MESSAGE))
    _remove_records(p, gone)
    return bool(bad) or bool(empty) or bool(broken) or bool(blank)


def _blank_texts(rec: Rec) -> list[Any]:
    """The text blocks of `rec` the API refuses: no text string, or only whitespace."""
    return [b for b in _blocks(rec) if isinstance(b, dict) and b.get("type") == "text"
            and not (isinstance(b.get("text"), str) and b["text"].strip())]


def _well_formed(call: dict[str, Any]) -> bool:
    """A tool_use block the API takes: a string id and name, and an input object."""
    return (isinstance(call.get("id"), str) and bool(call["id"])
            and isinstance(call.get("name"), str) and bool(call["name"])
            and isinstance(call.get("input"), dict))


def _has_content(rec: Rec) -> bool:
    content = rec.value["message"].get("content")
    return bool(content.strip()) if isinstance(content, str) else bool(_blocks(rec))


def _is_empty(rec: Rec) -> bool:
    """A user record whose message has nothing to send (no content, or only blank text)."""
    if rec.value.get("isCompactSummary") is True:
        return False
    content = rec.value["message"].get("content")
    if isinstance(content, str):
        return not content.strip()
    if not isinstance(content, list):
        return True
    return all(isinstance(b, dict) and b.get("type") == "text"
               and not str(b.get("text", "")).strip() for b in content)


def _drop_blocks(p: MendPlan, rec: Rec, found: list[tuple[str, Any]]) -> bool:
    """Remove the tool_result blocks of `rec` named in `found` (the first block of each id that
    was kept stays); False when nothing is left of it (the record is to go)."""
    budget: dict[Any, int] = {}
    for _, tool_id in found:
        budget[tool_id] = budget.get(tool_id, 0) + 1
    keep: list[Any] = []
    seen: dict[Any, int] = {}
    total = {t: _result_ids(rec).count(t) for t in budget}
    for block in _blocks(rec):
        if isinstance(block, dict) and block.get("type") == "tool_result":
            tool_id = block.get("tool_use_id")
            if tool_id in budget:
                seen[tool_id] = seen.get(tool_id, 0) + 1
                # the ones kept are the first (total - budget) of this id
                if seen[tool_id] > total[tool_id] - budget[tool_id]:
                    continue
        keep.append(block)
    for kind, tool_id in found:
        what = ("answers a call already answered" if kind == DUPLICATE_RESULT
                else "answers no call of the message before it")
        p.problem(kind, "removed the tool_result block" if keep else
                  "quarantined the record (it held nothing else)", rec,
                  detail=f"tool_use_id {tool_id!r} {what}")
    if not keep:
        return False
    value = rec.edit(rec.reason or found[0][0])
    value["message"] = {**value["message"], "content": keep}
    return True


def _remove_records(p: MendPlan, gone: list[tuple[Rec, str]]) -> None:
    """Quarantine `gone` (records left with nothing), re-attaching what hung on each to its
    parent (or its parent's, if that goes too): one pass over the file however many go."""
    if not gone:
        return
    parent_of: dict[str, Any] = {}
    for rec, kind in gone:
        p.drop(rec, kind, "a record the resumed chain cannot keep (see its reason)")
        if rec.uuid is not None:
            parent_of[rec.uuid] = rec.parent

    def kept_parent(key: Any) -> Any:
        seen = set()
        while key in parent_of and key not in seen:
            seen.add(key)
            key = parent_of[key]
        return None if key in parent_of else key

    for other in p.kept():
        if other.parent in parent_of:
            key = other.parent
            target = kept_parent(key)
            other.edit(other.reason or REPARENTED)["parentUuid"] = target
            p.problem(REPARENTED, f"re-attached to {target}", other, consequence=True,
                      detail=f"its parent {key} was removed")
        logical = other.value.get("logicalParentUuid")
        if logical in parent_of:
            target = kept_parent(logical)
            other.edit(other.reason or REPARENTED)["logicalParentUuid"] = target
            p.problem(REPARENTED, f"logicalParentUuid now {target}", other, consequence=True,
                      detail=f"record {logical} was removed")


def _answer_open_calls(p: MendPlan) -> None:
    records = p.kept()
    chain = active_chain(records)
    messages = _messages(chain, records)
    position = {id(r): n for n, r in enumerate(chain)}
    taken = {r.uuid for r in records if r.uuid is not None}
    template = next((r.value for r in records if r.value.get("type") == "user"
                     and r.uuid is not None), None)
    block_template = next((b for r in records if r.value.get("type") == "user"
                           for b in _blocks(r)
                           if isinstance(b, dict) and b.get("type") == "tool_result"), None)
    before: dict[int, list[Rec]] = {}  # id(record) -> records to insert before it
    behind: dict[int, list[Rec]] = {}  # id(record) -> records to insert after it
    for index, msg in enumerate(messages):
        if msg.kind != "assistant":
            continue
        calls = _tool_ids(msg.lines())
        if not calls:
            continue
        got: set[Any] = set()
        for following in messages[index + 1:]:
            if following.kind != "results":
                break
            got.update(_result_ids(following.recs[0]))
        missing = [c for c in calls if c not in got]
        if not missing:
            continue
        caller = next(r for r in reversed(msg.lines()) if set(_tool_ids([r])) & set(missing))
        last = position[id(msg.recs[-1])]
        after = chain[last + 1] if last + 1 < len(chain) else None
        parent = after.parent if after is not None else msg.recs[-1].uuid
        record = interrupted_result(caller.value, str(parent), missing, taken=taken,
                                    template=template, block_template=block_template)
        taken.add(record["uuid"])
        added = Rec(record, None, None, None, reason="synthetic")
        if after is not None:
            before.setdefault(id(after), []).append(added)
        else:
            behind.setdefault(id(msg.recs[-1]), []).append(added)
        p.problem(UNPAIRED_TOOL_USE,
                  f"added the interrupted-tool result record {record['uuid']}", caller,
                  detail=f"no tool_result for {', '.join(missing)}")
        if after is not None:
            after.edit(after.reason or REPARENTED)["parentUuid"] = record["uuid"]
            p.problem(REPARENTED, f"re-attached to {record['uuid']}", after, consequence=True,
                      detail="the record after the unanswered calls")
    if before or behind:
        rebuilt: list[Rec] = []
        for rec in p.records:
            rebuilt.extend(before.get(id(rec), ()))
            rebuilt.append(rec)
            rebuilt.extend(behind.get(id(rec), ()))
        p.records[:] = rebuilt


__all__ = ["active_chain", "fix_pairing"]
