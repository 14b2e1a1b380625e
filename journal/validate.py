"""Strict checks of the Anthropic tool pairing rules, on pi-shaped messages and on API payloads.

These functions only look; they never change anything. `pairing_problems` reads messages in
pi's shape (as projected from a session, before they are converted for a provider) and
`api_pairing_problems` reads the `messages` list of an Anthropic Messages API request. Both
return one readable line per problem, naming the index of the offending message, and an empty
list when the history is valid. They are written apart from `journal.pairing` on purpose, so
that each can check the other.

What pi-shaped messages must satisfy:

- a `toolCall` block has a non-empty string `id`, a non-empty string `name` and `arguments`
  that are an object;
- tool call ids are unique across the whole history;
- the results of an assistant message's calls come right after it, as a run of `toolResult`
  messages (any other message ends the run), with exactly one result per call, in any order;
- a `toolResult` names a call of the assistant message its run follows; a second result for
  the same call is a duplicate;
- text blocks (in user, custom, assistant and tool-result content) are not empty or blank;
- user, custom and assistant messages have content, except an assistant message that ends the
  history (a prefill may be empty). A tool result may have empty content.

What an API request's messages must satisfy: the same, with `tool_use` blocks (only in assistant
messages, `input` an object) and `tool_result` blocks (only in user messages): every
`tool_use` is answered exactly once by a `tool_result` in the message right after its
assistant message, which must be a user message; `tool_result` blocks come before any other
block of their message; a `tool_result` names a `tool_use` of the message right before it.
Consecutive messages with the same role are allowed.
"""

from __future__ import annotations

from typing import Any

from .errors import JournalError

_TEXT_ROLES = ("user", "custom", "assistant")


class InvalidPairing(JournalError, AssertionError):
    """A history breaks the tool pairing rules; `problems` lists each break."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(
            f"{len(problems)} tool pairing problem(s):\n{shown}{more}\n"
            "Pass the messages through journal.pairing.sanitize before sending them."
        )


def assert_valid_pairing(messages: list[dict[str, Any]]) -> None:
    """Raise `InvalidPairing` unless `pairing_problems(messages)` is empty.

    Example:
        >>> assert_valid_pairing([{"role": "user", "content": "hi"}])
    """
    problems = pairing_problems(messages)
    if problems:
        raise InvalidPairing(problems)


def pairing_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Every way pi-shaped `messages` break the pairing rules; empty when they are valid.

    Example:
        >>> pairing_problems([
        ...     {"role": "assistant", "content": [
        ...         {"type": "toolCall", "id": "t1", "name": "ls", "arguments": {}}]},
        ...     {"role": "user", "content": "?"},
        ... ])
        ["messages[0]: tool call 't1' has no result right after its message"]
    """
    problems: list[str] = []
    first_use: dict[str, int] = {}
    run: _Run | None = None
    last = len(messages) - 1

    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            _close(run, problems)
            run = None
            problems.append(f"{where}: not a message object")
            continue
        role = message.get("role")
        if role == "toolResult":
            _check_result(where, message, run, first_use, problems)
            continue
        _close(run, problems)
        run = None
        if role in _TEXT_ROLES:
            content = message.get("content")
            _check_text(where, content, problems)
            if _is_empty(content) and not (role == "assistant" and i == last):
                problems.append(f"{where}: {role} message has no content")
        if role == "assistant":
            run = _check_calls(i, message.get("content"), first_use, problems)
    _close(run, problems)
    return problems


class _Run:
    """The calls of one assistant message, waiting for their results."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.answered: dict[str, bool] = {}


def _close(run: _Run | None, problems: list[str], noun: str = "tool call") -> None:
    if run is not None:
        for call_id, answered in run.answered.items():
            if not answered:
                problems.append(
                    f"messages[{run.index}]: {noun} {call_id!r} has no result right after "
                    "its message"
                )


def _check_calls(
    i: int, content: Any, first_use: dict[str, int], problems: list[str]
) -> _Run | None:
    run = _Run(i)
    for k, block in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(block, dict) or block.get("type") != "toolCall":
            continue
        where = f"messages[{i}].content[{k}]"
        call_id = block.get("id")
        name = block.get("name")
        if not isinstance(name, str) or not name.strip():
            problems.append(f"{where}: tool call has no name")
        if not isinstance(block.get("arguments"), dict):
            problems.append(f"{where}: tool call arguments are missing or not an object")
        if not isinstance(call_id, str) or not call_id.strip():
            problems.append(f"{where}: tool call has no id")
            continue
        if call_id in first_use:
            problems.append(
                f"{where}: tool call id {call_id!r} is already used at "
                f"messages[{first_use[call_id]}]"
            )
        else:
            first_use[call_id] = i
        run.answered[call_id] = False
    return run if run.answered else None


def _check_result(
    where: str,
    result: dict[str, Any],
    run: _Run | None,
    first_use: dict[str, int],
    problems: list[str],
) -> None:
    call_id = result.get("toolCallId")
    if run is None:
        problems.append(
            f"{where}: tool result {call_id!r} does not follow an assistant message with tool "
            "calls (or another message came in between)"
        )
    elif not isinstance(call_id, str) or call_id not in run.answered:
        elsewhere = f" (its call is at messages[{first_use[call_id]}])" if isinstance(
            call_id, str) and call_id in first_use else ""
        problems.append(
            f"{where}: tool result {call_id!r} matches no call of messages[{run.index}]{elsewhere}"
        )
    elif run.answered[call_id]:
        problems.append(f"{where}: second result for tool call {call_id!r}")
    else:
        run.answered[call_id] = True
    _check_text(where, result.get("content"), problems)


def _check_text(where: str, content: Any, problems: list[str]) -> None:
    if isinstance(content, str):
        if content and not content.strip():
            problems.append(f"{where}: content is only whitespace")
        return
    if not isinstance(content, list):
        return
    for k, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if not isinstance(text, str) or not text.strip():
                problems.append(f"{where}.content[{k}]: text block is empty or blank")


def _is_empty(content: Any) -> bool:
    if isinstance(content, str | list):
        return len(content) == 0
    return True


def api_pairing_problems(api_messages: list[dict[str, Any]]) -> list[str]:
    """Every way an Anthropic request's `messages` break the pairing rules; empty when valid.

    Example:
        >>> api_pairing_problems([
        ...     {"role": "user", "content": "list files"},
        ...     {"role": "assistant", "content": [
        ...         {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
        ...     {"role": "user", "content": [
        ...         {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]},
        ... ])
        []
    """
    problems: list[str] = []
    first_use: dict[str, int] = {}
    pending: _Run | None = None  # tool_use ids of the previous message, if an assistant's
    last = len(api_messages) - 1

    for i, message in enumerate(api_messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            _close(pending, problems, "tool_use")
            pending = None
            problems.append(f"{where}: not a message object")
            continue
        role = message.get("role")
        content = message.get("content")
        if role not in ("user", "assistant"):
            problems.append(f"{where}: role {role!r} is neither 'user' nor 'assistant'")
        if _is_empty(content) and not (role == "assistant" and i == last):
            problems.append(f"{where}: {role} message has no content")
        _check_text(where, content, problems)
        blocks = content if isinstance(content, list) else []
        answering = pending if role == "user" else None
        if role != "user" and pending is not None:
            _close(pending, problems, "tool_use")
            pending = None
        seen_other = False
        uses = _Run(i)
        for k, block in enumerate(blocks):
            if not isinstance(block, dict):
                seen_other = True
                continue
            kind = block.get("type")
            at = f"{where}.content[{k}]"
            if kind == "tool_result":
                if role != "user":
                    problems.append(f"{at}: tool_result outside a user message")
                elif seen_other:
                    problems.append(f"{at}: tool_result after another kind of block")
                _check_api_result(at, block, answering, i, first_use, problems)
                _check_text(at, block.get("content"), problems)
                continue
            seen_other = True
            if kind == "tool_use":
                if role != "assistant":
                    problems.append(f"{at}: tool_use outside an assistant message")
                    continue
                _check_api_use(at, i, block, uses, first_use, problems)
        if role == "user":
            _close(pending, problems, "tool_use")
            pending = None
        if role == "assistant" and uses.answered:
            pending = uses
    _close(pending, problems, "tool_use")
    return problems


def _check_api_use(
    at: str,
    i: int,
    block: dict[str, Any],
    uses: _Run,
    first_use: dict[str, int],
    problems: list[str],
) -> None:
    use_id = block.get("id")
    name = block.get("name")
    if not isinstance(name, str) or not name.strip():
        problems.append(f"{at}: tool_use has no name")
    if not isinstance(block.get("input"), dict):
        problems.append(f"{at}: tool_use input is missing or not an object")
    if not isinstance(use_id, str) or not use_id.strip():
        problems.append(f"{at}: tool_use has no id")
        return
    if use_id in first_use:
        problems.append(
            f"{at}: tool_use id {use_id!r} is already used at messages[{first_use[use_id]}]"
        )
    else:
        first_use[use_id] = i
    uses.answered[use_id] = False


def _check_api_result(
    at: str,
    block: dict[str, Any],
    answering: _Run | None,
    i: int,
    first_use: dict[str, int],
    problems: list[str],
) -> None:
    use_id = block.get("tool_use_id")
    if answering is None or not isinstance(use_id, str) or use_id not in answering.answered:
        if isinstance(use_id, str) and use_id in first_use:
            problems.append(
                f"{at}: tool_result {use_id!r} is not in the message right after its tool_use "
                f"(messages[{first_use[use_id]}])"
            )
        elif answering is None:
            problems.append(
                f"{at}: tool_result {use_id!r} does not follow an assistant message with tool_use "
                "blocks"
            )
        else:
            problems.append(f"{at}: tool_result {use_id!r} names no tool_use of messages[{i - 1}]")
    elif answering.answered[use_id]:
        problems.append(f"{at}: second tool_result for tool_use {use_id!r}")
    else:
        answering.answered[use_id] = True

