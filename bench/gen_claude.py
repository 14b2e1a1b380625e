"""Synthetic Claude Code transcript generator, for tests and benchmarks.

Writes what Claude Code (2.x) writes under ``~/.claude/projects/<project>/``: one
``<sessionId>.jsonl`` transcript and, for each subagent it ran, a
``<sessionId>/subagents/agent-<agentId>.jsonl`` file. The record shapes follow the public
descriptions of the format (claude-code-log's documentation and test data, the tracker's bug
reports); no line is copied from anywhere.

What a generated transcript holds:

* records ``user``, ``assistant``, ``system`` (``compact_boundary``, ``turn_duration``,
  ``local_command``), ``summary``, ``attachment``, ``file-history-snapshot``,
  ``queue-operation``, ``progress`` and ``ai-title``;
* assistant turns written one content block per line, the lines of one API response sharing
  ``message.id`` and ``requestId`` (thinking blocks with signatures, text, tool calls, sometimes
  several tool calls in parallel); usage fields on every line, the final counts on the last;
* tool results as ``user`` records with ``toolUseResult``, each hanging on the line of its own
  ``tool_use``, so that with parallel calls all but the last result sit beside the chain (the
  shape the resume logic has to gather back); parallel ``tool_use`` lines chained, or
  siblings of the first; hook ``progress`` records beside or inside the chain; images in
  prompts and in tool results; errors;
* several compactions (``compact_boundary`` with ``parentUuid: null``, ``logicalParentUuid`` and
  ``compactMetadata``, then the ``isCompactSummary`` user record; half of them keep the last
  turn as a ``preservedSegment``, the conversation going on from its tail), rewinds (a new
  prompt whose parent is an earlier turn end, the old branch left in the file), legacy inline
  sidechains (``isSidechain: true`` chains in the main file) and subagent files.

Deterministic for a seed: all randomness comes from one ``random.Random(seed)`` and timestamps
advance from a fixed start. :func:`generate` returns what it wrote, including the truth a
reader's projection must find: the leaf and the context after the latest compaction, as
``(kind, key)`` pairs: ``("summary", uuid)`` for the compaction summary, ``("user", uuid)`` for a
prompt record, ``("assistant", message.id)`` for one merged API response and
``("toolResult", tool_use_id)`` for each tool result, in the order the model sees them.

CLI::

    python bench/gen_claude.py OUT_DIR --mb 100 [--seed N] [--compactions 4] [--rewinds 6]
"""

from __future__ import annotations

import argparse
import base64
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

KB = 1024
MB = 1024 * KB

START_MS = 1768467600000  # 2026-01-15T09:00:00.000Z
VERSION = "2.0.76"
CWD = "/home/user/project"
BRANCH = "main"
MODELS = ("claude-sonnet-4-5-20250929", "claude-opus-4-5-20251101")
SUBAGENT_MODEL = "claude-haiku-4-5-20251001"
SUMMARY_PREFIX = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:\n"
)

_FLUSH_AT = 4 * MB
_DUMPS = orjson.dumps
_NL = orjson.OPT_APPEND_NEWLINE

_WORDS = (
    "the a to of and in that is for it with as on be this by are from or at we function file "
    "test error value config update change handle return import module class method build "
    "cache session entry token parse write read path line branch state context message result "
    "output input tool call check fix refactor should could need first then next because "
    "instead already only also edge case failing passing type interface schema field index "
    "offset buffer stream lock retry timeout handler parser writer reader snapshot projection"
).split()
_IDENTS = (
    "session entry parser writer reader buffer offset index cache state context message "
    "result handler options config stream lock leaf parent child node tree summary usage"
).split()
_DIRS = ("src", "src/core", "src/api", "src/web", "tests", "scripts", "docs")
_EXTS = ("py", "ts", "tsx", "md", "json", "sh")
_COMMANDS = ("npm test", "git status", "git diff --stat", "pytest -q {p}", "ls -la {d}",
             "rg -n {i} {d}", "wc -l {p}", "npx tsc --noEmit")
_TITLES = ("Fix the parser race", "Speed up the session loader", "Refactor the cache layer",
           "Add tail support", "Investigate flaky tests", "Port the web module")
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B62 = _B64[:62]
# the first bytes of a PNG file, so image data decodes to something that looks like one
_PNG_HEAD = base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR").decode()[:20]


@dataclass
class GenStats:
    """What :func:`generate` wrote and what a correct projection of it is."""

    path: Path
    session_id: str
    bytes: int = 0
    records: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    leaf: str | None = None
    context: list[tuple[str, str]] = field(default_factory=list)
    compactions: int = 0
    preserved: int = 0
    rewinds: int = 0
    subagents: list[Path] = field(default_factory=list)
    sidechains: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_type.items()))
        return (f"{self.path}: {self.bytes / MB:.1f} MB, {self.records} records ({kinds}); "
                f"{self.compactions} compactions ({self.preserved} keeping a segment), "
                f"{self.rewinds} rewinds, "
                f"{len(self.subagents)} subagent files, {self.sidechains} inline sidechains; "
                f"context {len(self.context)} messages; {self.seconds:.2f} s")


def _iso(ms: int) -> str:
    t = time.gmtime(ms // 1000)
    return (f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:"
            f"{t.tm_sec:02d}.{ms % 1000:03d}Z")


class _Text:
    """Random text, cut from pools made once, so that 100 MB are written in seconds."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.prose = " ".join(rng.choice(_WORDS) for _ in range(60_000))
        lines = []
        for _ in range(8_000):
            i, j = rng.choice(_IDENTS), rng.choice(_IDENTS)
            lines.append(rng.choice((
                f"def {i}_{j}({i}, {j}=None):", f"    return self.{i}.get({j})",
                f"    {i} = {j}[{rng.randint(0, 99)}]", f"class {i.title()}{j.title()}:",
                f"import {i}", f"    if not {i}:", f"        raise ValueError('{i} {j}')", "",
                f"    # {' '.join(rng.choice(_WORDS) for _ in range(6))}")))
        self.code = "\n".join(lines)
        self.b64 = "".join(rng.choice(_B64) for _ in range(200_000))

    def cut(self, pool: str, n: int) -> str:
        n = min(n, len(pool) - 1)
        start = self.rng.randrange(0, len(pool) - n)
        return pool[start:start + n]

    def words(self, lo: int, hi: int) -> str:
        return self.cut(self.prose, self.rng.randint(lo, hi)).strip() or "ok"

    def sentence(self) -> str:
        return self.words(30, 160).capitalize() + "."

    def path(self) -> str:
        r = self.rng
        return f"{CWD}/{r.choice(_DIRS)}/{r.choice(_IDENTS)}_{r.choice(_IDENTS)}.{r.choice(_EXTS)}"

    def signature(self) -> str:
        return "Eq" + self.cut(self.b64, self.rng.randint(200, 600))

    def image(self) -> dict[str, Any]:
        data = _PNG_HEAD + self.cut(self.b64, self.rng.randint(2_000, 12_000))
        return {"type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": data}}


class _Writer:
    """One output file: records buffered, counted and written in large blocks."""

    def __init__(self, path: Path, stats: GenStats, main: bool = True) -> None:
        self.path = path
        self.main = main
        self.stats = stats
        self.fh = path.open("wb")
        self.buf: list[bytes] = []
        self.size = 0

    def put(self, record: dict[str, Any]) -> None:
        line = _DUMPS(record, option=_NL)
        self.buf.append(line)
        self.size += len(line)
        if self.main:
            self.stats.bytes += len(line)
            self.stats.records += 1
        kind = record["type"]
        self.stats.by_type[kind] = self.stats.by_type.get(kind, 0) + 1
        if self.size >= _FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        self.fh.write(b"".join(self.buf))
        self.buf.clear()
        self.size = 0

    def close(self) -> None:
        self.flush()
        self.fh.close()


class _Gen:
    def __init__(self, out_dir: Path, seed: int, target: int, compactions: int,
                 rewinds: int, subagents: bool, sidechains: bool,
                 last_compaction_within: int | None = None, preserve: bool = True) -> None:
        self.rng = random.Random(seed)
        self.text = _Text(self.rng)
        self.session_id = self._uuid()
        self.out_dir = out_dir
        self.stats = GenStats(out_dir / f"{self.session_id}.jsonl", self.session_id)
        self.main = _Writer(self.stats.path, self.stats)
        self.target = target
        # the byte offsets at which to compact or rewind, spread over the file
        self.compact_at = sorted(self.rng.uniform(0.15, 0.97) * target
                                 for _ in range(compactions))
        if last_compaction_within is not None and self.compact_at:
            # the latest compaction this close to the end (a session that resumes from its tail)
            self.compact_at[-1] = max(0, target - last_compaction_within)
            self.compact_at.sort()
        self.rewind_at = sorted(self.rng.uniform(0.05, 0.98) * target for _ in range(rewinds))
        self.with_subagents = subagents
        self.with_sidechains = sidechains
        self.now = START_MS
        self.model = MODELS[0]
        self.last: str | None = None          # the record the next chained record hangs on
        self.context: list[tuple[str, str]] = []  # the projection of the chain so far
        self.turn_ends: list[tuple[str, int]] = []  # rewind targets since the latest compaction
        self.turn_starts: list[tuple[str, int]] = []  # (head, context length before it)
        self.preserve = preserve
        self.leaf: str | None = None
        self.tool_seq = 0

    # -- small helpers

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _api_id(self, prefix: str) -> str:
        """An API id (`msg_01...`, `toolu_01...`): 22 base-62 characters, unique."""
        n = self.rng.getrandbits(128)
        chars = []
        for _ in range(22):
            n, d = divmod(n, 62)
            chars.append(_B62[d])
        return prefix + "".join(chars)

    def _hex(self, n: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def _ts(self, lo: int = 200, hi: int = 4000) -> str:
        self.now += self.rng.randint(lo, hi)
        return _iso(self.now)

    def _base(self, parent: str | None, *, sidechain: bool = False,
              agent: str | None = None) -> dict[str, Any]:
        rec: dict[str, Any] = {"parentUuid": parent, "isSidechain": sidechain,
                               "userType": "external", "cwd": CWD,
                               "sessionId": self.session_id, "version": VERSION,
                               "gitBranch": BRANCH}
        if agent is not None:
            rec["agentId"] = agent
        return rec

    def _usage(self, out_tokens: int) -> dict[str, Any]:
        r = self.rng
        created = r.choice((0, 0, r.randint(100, 9000)))
        return {"input_tokens": r.randint(1, 12), "cache_creation_input_tokens": created,
                "cache_read_input_tokens": r.randint(10_000, 150_000),
                "cache_creation": {"ephemeral_5m_input_tokens": created,
                                   "ephemeral_1h_input_tokens": 0},
                "output_tokens": out_tokens, "service_tier": "standard"}

    # -- records

    def _user(self, w: _Writer, content: Any, *, sidechain: bool = False,
              agent: str | None = None, extra: dict[str, Any] | None = None,
              parent: str | None = None, chain: bool = True, uid: str | None = None) -> str:
        uid = uid or self._uuid()
        rec = self._base(self.last if parent is None and chain else parent,
                         sidechain=sidechain, agent=agent)
        rec["type"] = "user"
        rec["message"] = {"role": "user", "content": content}
        if extra:
            rec.update({k: v for k, v in extra.items() if k not in ("toolUseResult",)})
        rec["uuid"] = uid
        rec["timestamp"] = self._ts()
        if extra and "toolUseResult" in extra:
            rec["toolUseResult"] = extra["toolUseResult"]
        w.put(rec)
        return uid

    def _assistant_lines(self, w: _Writer, blocks: list[dict[str, Any]], *,
                         sidechain: bool = False, agent: str | None = None,
                         model: str | None = None, chained_progress: bool = False,
                         siblings: bool = False) -> tuple[str, list[str]]:
        """One API response, one record per content block; returns (message id, uuids).

        The lines hang one on the other; with `siblings`, every tool_use line after the first
        hangs where the first one does (the other shape Claude Code writes parallel calls in).
        """
        mid = self._api_id("msg_01")
        req = "req_011C" + self._hex(16)
        uuids = []
        stop = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
        out_total = self.rng.randint(20, 2_000)
        fork: str | None = None
        for n, block in enumerate(blocks):
            if siblings and block["type"] == "tool_use":
                if fork is None:
                    fork = self.last
                else:
                    self.last = fork
            uid = self._uuid()
            last_line = n == len(blocks) - 1
            rec = self._base(self.last, sidechain=sidechain, agent=agent)
            rec["message"] = {"model": model or self.model, "id": mid, "type": "message",
                              "role": "assistant", "content": [block],
                              "stop_reason": stop if last_line else None,
                              "stop_sequence": None,
                              "usage": self._usage(out_total if last_line else 1 + n)}
            rec["requestId"] = req
            rec["type"] = "assistant"
            rec["uuid"] = uid
            rec["timestamp"] = self._ts(50, 900)
            w.put(rec)
            uuids.append(uid)
            self.last = uid
            if chained_progress and block["type"] == "tool_use" and not last_line:
                # newer versions thread a hook's progress record through the chain between the
                # tool calls of one response
                self.last = self._progress(w, uid, block["id"], sidechain, agent)
        return mid, uuids

    def _progress(self, w: _Writer, parent: str, tool_id: str, sidechain: bool = False,
                  agent: str | None = None) -> str:
        uid = self._uuid()
        rec = self._base(parent, sidechain=sidechain, agent=agent)
        rec["type"] = "progress"
        rec["data"] = {"type": "hook_progress", "hookEvent": "PostToolUse",
                       "hookName": "PostToolUse:Bash", "command": "./hooks/check.sh"}
        rec["parentToolUseID"] = tool_id
        rec["toolUseID"] = tool_id
        rec["timestamp"] = self._ts(5, 60)
        rec["uuid"] = uid
        w.put(rec)
        return uid

    def _system(self, w: _Writer, subtype: str, fields: dict[str, Any],
                parent: str | None) -> str:
        uid = self._uuid()
        rec = self._base(parent)
        if subtype == "compact_boundary":
            rec = {"parentUuid": None, "logicalParentUuid": parent, **{
                k: v for k, v in rec.items() if k != "parentUuid"}}
        rec["type"] = "system"
        rec["subtype"] = subtype
        rec.update(fields)
        rec["isMeta"] = False
        rec["timestamp"] = self._ts(5, 200)
        rec["uuid"] = uid
        w.put(rec)
        return uid

    def _attachment(self, w: _Writer, parent: str | None) -> str:
        uid = self._uuid()
        rec = self._base(parent)
        rec["type"] = "attachment"
        rec["attachment"] = {"type": "hook_success", "hookName": "UserPromptSubmit",
                             "toolUseID": "", "hookEvent": "UserPromptSubmit",
                             "content": self.text.words(20, 120), "stdout": "", "stderr": "",
                             "exitCode": 0}
        rec["uuid"] = uid
        rec["timestamp"] = self._ts(5, 100)
        w.put(rec)
        return uid

    # -- tools

    def _tool_call(self) -> tuple[dict[str, Any], Any, Any, bool]:
        """A tool_use block, its tool_result content, its toolUseResult, is_error."""
        r, t = self.rng, self.text
        self.tool_seq += 1
        tid = self._api_id("toolu_01")
        kind = r.choices(("Read", "Edit", "Bash", "Grep", "ReadImage", "Error"),
                         (30, 20, 25, 10, 3, 5))[0]
        path = t.path()
        if kind == "Read" or kind == "ReadImage":
            use = {"file_path": path}
            if kind == "ReadImage":
                img = t.image()
                use = {"file_path": path.rsplit(".", 1)[0] + ".png"}
                return ({"type": "tool_use", "id": tid, "name": "Read", "input": use},
                        [img], {"type": "image", "file": {"base64": img["source"]["data"][:64],
                                                           "type": "image/png"}}, False)
            body = t.cut(t.code, r.randint(500, 12_000))
            numbered = "\n".join(f"{n:>6}\u2192{line}"
                                 for n, line in enumerate(body.split("\n"), 1))
            return ({"type": "tool_use", "id": tid, "name": "Read", "input": use}, numbered,
                    {"type": "text", "file": {"filePath": path, "content": body,
                                              "numLines": body.count("\n") + 1,
                                              "startLine": 1,
                                              "totalLines": body.count("\n") + 1}}, False)
        if kind == "Edit":
            old, new = t.cut(t.code, r.randint(40, 600)), t.cut(t.code, r.randint(40, 900))
            return ({"type": "tool_use", "id": tid, "name": "Edit",
                     "input": {"file_path": path, "old_string": old, "new_string": new}},
                    f"The file {path} has been updated.",
                    {"filePath": path, "oldString": old, "newString": new,
                     "userModified": False, "replaceAll": False}, False)
        if kind == "Grep":
            pat = r.choice(_IDENTS)
            out = "\n".join(t.path() for _ in range(r.randint(1, 20)))
            return ({"type": "tool_use", "id": tid, "name": "Grep",
                     "input": {"pattern": pat, "path": CWD}}, out,
                    {"mode": "files_with_matches", "filenames": out.split("\n"),
                     "numFiles": out.count("\n") + 1}, False)
        if kind == "Error":
            msg = f"<tool_use_error>File does not exist: {path}</tool_use_error>"
            return ({"type": "tool_use", "id": tid, "name": "Read",
                     "input": {"file_path": path}}, msg, f"Error: File does not exist: {path}",
                    True)
        cmd = r.choice(_COMMANDS).format(p=path, d=r.choice(_DIRS), i=r.choice(_IDENTS))
        out = t.cut(t.code, r.randint(100, 6_000))
        return ({"type": "tool_use", "id": tid, "name": "Bash",
                 "input": {"command": cmd, "description": t.words(10, 40)}}, out,
                {"stdout": out, "stderr": "", "interrupted": False, "isImage": False}, False)

    def _results(self, w: _Writer, calls: list[tuple[dict[str, Any], Any, Any, bool]],
                 owners: list[str], *, sidechain: bool = False, agent: str | None = None,
                 progress_beside: bool = False, progress_carries: bool = False) -> str:
        """One user record per result, each on the line of its tool_use; the chain goes on
        from the last, or (`progress_carries`, as newer versions write it) from a hook's
        progress record on the last call's line, written before that call's result."""
        carrier: str | None = None
        for n, ((use, content, tur, err), owner) in enumerate(zip(calls, owners, strict=True)):
            if use["name"] == "Task":
                self._run_subagent(tur["agentId"], tur["prompt"])
            if progress_beside:
                self._progress(w, owner, use["id"], sidechain, agent)
            if progress_carries and n == len(calls) - 1:
                carrier = self._progress(w, owner, use["id"], sidechain, agent)
            block: dict[str, Any] = {"tool_use_id": use["id"], "type": "tool_result",
                                     "content": content}
            if err:
                block["is_error"] = True
            self.last = self._user(w, [block], sidechain=sidechain, agent=agent,
                                   parent=owner, chain=False,
                                   extra={"toolUseResult": tur,
                                          "sourceToolAssistantUUID": owner})
            if not sidechain:
                self.context.append(("toolResult", use["id"]))
        result = self.last
        assert result is not None
        if carrier is not None:
            self.last = carrier
        return result  # the last result (the leaf, when nothing follows)

    # -- the conversation

    def _prompt(self) -> None:
        """The records that open a turn; the first of them chained is the turn's head."""
        r, t = self.rng, self.text
        head: str | None = None
        start = len(self.context)
        if r.random() < 0.4:
            self.main.put({"type": "queue-operation", "operation": "enqueue",
                           "timestamp": self._ts(5, 50), "sessionId": self.session_id,
                           "content": t.sentence()})
            self.main.put({"type": "queue-operation", "operation": "dequeue",
                           "timestamp": self._ts(5, 50), "sessionId": self.session_id})
        if r.random() < 0.08:
            # a local command: the caveat (isMeta), the command and its output, as users
            for content, meta in (
                ("<local-command-caveat>Caveat: The messages below were generated by the user "
                 "while running local commands. DO NOT respond to these messages or otherwise "
                 "consider them in your response unless the user explicitly asks you to."
                 "</local-command-caveat>", True),
                ("<command-name>/model</command-name>\n<command-message>model</command-message>"
                 "\n<command-args></command-args>", False),
                (f"<local-command-stdout>Set model to {self.model}</local-command-stdout>",
                 False)):
                self.last = self._user(self.main, content,
                                       extra={"isMeta": True} if meta else None)
                head = head or self.last
                self.context.append(("user", self.last))
        if r.random() < 0.05:
            self.last = self._system(self.main, "local_command",
                                     {"content": "<command-name>/cost</command-name>",
                                      "level": "info"}, self.last)
            head = head or self.last
        text = t.sentence() + " " + t.words(0, 400)
        content: Any = text
        if r.random() < 0.05:
            content = [t.image(), {"type": "text", "text": text}]
        elif r.random() < 0.3:
            content = [{"type": "text", "text": text}]
        uid = self._uuid()
        self.main.put({"type": "file-history-snapshot", "messageId": uid,
                       "snapshot": {"messageId": uid, "trackedFileBackups": {
                           t.path(): {"backupFileName": f"{self._hex(16)}@v1", "version": 1,
                                      "backupTime": _iso(self.now)}} if r.random() < 0.5 else {},
                           "timestamp": _iso(self.now)},
                       "isSnapshotUpdate": False})
        self.last = self._user(self.main, content, uid=uid)
        self.leaf = uid
        self.context.append(("user", uid))
        self.turn_starts.append((head or uid, start))
        if r.random() < 0.15:
            self.last = self._attachment(self.main, self.last)

    def _response(self, final: bool) -> None:
        """One API response of the main chain, then its tool results (unless final)."""
        r, t = self.rng, self.text
        blocks: list[dict[str, Any]] = []
        if r.random() < 0.6:
            blocks.append({"type": "thinking", "thinking": t.words(100, 3000),
                           "signature": t.signature()})
        elif r.random() < 0.02:
            blocks.append({"type": "redacted_thinking", "data": t.signature()})
        if final or r.random() < 0.7:
            blocks.append({"type": "text", "text": t.sentence() + " " + t.words(0, 1500)})
        calls = []
        if not final:
            n = r.choices((1, 2, 3, 4), (60, 20, 12, 8))[0]
            calls = [self._tool_call() for _ in range(n)]
            if self.with_subagents and r.random() < 0.04:
                calls.append(self._task_call())
            blocks.extend(c[0] for c in calls)
        chained = r.random() < 0.25
        siblings = not chained and r.random() < 0.25
        mid, uuids = self._assistant_lines(self.main, blocks, chained_progress=chained,
                                           siblings=siblings)
        self.leaf = uuids[-1]
        self.context.append(("assistant", mid))
        if calls:
            owners = uuids[len(blocks) - len(calls):]
            beside = r.random() < 0.2
            self.leaf = self._results(self.main, calls, owners, progress_beside=beside,
                                      progress_carries=not beside and r.random() < 0.15)

    def _turn(self) -> None:
        self._prompt()
        for _ in range(self.rng.choices((0, 1, 2, 3, 5), (15, 30, 25, 20, 10))[0]):
            self._response(final=False)
        self._response(final=True)
        if self.rng.random() < 0.5:
            self.last = self._system(self.main, "turn_duration",
                                     {"durationMs": self.rng.randint(2_000, 300_000)},
                                     self.last)
        if self.rng.random() < 0.03:
            self.main.put({"type": "ai-title", "aiTitle": self.rng.choice(_TITLES),
                           "sessionId": self.session_id})
        if self.rng.random() < 0.02:
            self.main.put({"type": "summary", "summary": self.rng.choice(_TITLES),
                           "leafUuid": self.leaf})
        assert self.last is not None
        self.turn_ends.append((self.last, len(self.context)))

    def _compact(self) -> None:
        """A compaction; half of them keep the last turn (a preserved segment: Claude Code
        relinks its head under the summary when it loads the file, and goes on from its
        tail)."""
        r = self.rng
        tail = self.last
        assert tail is not None
        meta: dict[str, Any] = {"trigger": r.choice(("auto", "manual")),
                                "preTokens": r.randint(120_000, 180_000)}
        summary = self._uuid()
        kept: list[tuple[str, str]] = []
        if self.preserve and self.turn_starts and r.random() < 0.5:
            head, start = self.turn_starts[-1]
            kept = self.context[start:]
            meta["preservedSegment"] = {"headUuid": head, "anchorUuid": summary,
                                        "tailUuid": tail}
        boundary = self._system(self.main, "compact_boundary", {
            "content": "Conversation compacted", "level": "info", "compactMetadata": meta},
            tail)
        self.last = boundary
        text = SUMMARY_PREFIX + "\n".join(self.text.sentence() for _ in range(r.randint(5, 30)))
        self._user(self.main, text, extra={"isVisibleInTranscriptOnly": True,
                                           "isCompactSummary": True}, uid=summary)
        self.context = [("summary", summary), *kept]
        self.last = tail if kept else summary
        self.turn_ends = [(self.last, len(self.context))]
        self.turn_starts = []
        self.stats.compactions += 1
        self.stats.preserved += bool(kept)

    def _rewind(self) -> None:
        if len(self.turn_ends) < 2:
            return
        target, length = self.rng.choice(self.turn_ends[:-1])
        self.last = target
        del self.context[length:]
        keep = [te for te in self.turn_ends if te[1] <= length]
        self.turn_ends = keep
        self.turn_starts = [ts for ts in self.turn_starts if ts[1] < length]
        self.stats.rewinds += 1

    def _inline_sidechain(self) -> None:
        """A legacy sidechain: a chain of its own in the main file, not part of the context."""
        saved, saved_leaf = self.last, self.leaf
        self.last = None
        self.last = self._user(self.main, self.text.sentence(), sidechain=True)
        for final in (False, True):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": self.text.sentence()}]
            calls = [] if final else [self._tool_call()]
            blocks.extend(c[0] for c in calls)
            _, uuids = self._assistant_lines(self.main, blocks, sidechain=True,
                                             model=SUBAGENT_MODEL)
            if calls:
                self._results(self.main, calls, uuids[-1:], sidechain=True)
        self.last, self.leaf = saved, saved_leaf
        self.stats.sidechains += 1

    def _run_subagent(self, agent: str, prompt: str) -> None:
        """The subagent of a Task call: a sidechain in ``<session>/subagents/agent-<id>.jsonl``."""
        r, t = self.rng, self.text
        folder = self.out_dir / self.session_id / "subagents"
        folder.mkdir(parents=True, exist_ok=True)
        sub = _Writer(folder / f"agent-{agent}.jsonl", self.stats, main=False)
        saved = self.last
        self.last = None
        self.last = self._user(sub, prompt, sidechain=True, agent=agent)
        for final in [False] * r.randint(0, 3) + [True]:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": t.sentence()}]
            calls = [] if final else [self._tool_call() for _ in range(r.randint(1, 2))]
            blocks.extend(c[0] for c in calls)
            _, uuids = self._assistant_lines(sub, blocks, sidechain=True, agent=agent,
                                             model=SUBAGENT_MODEL)
            if calls:
                self._results(sub, calls, uuids[len(blocks) - len(calls):], sidechain=True,
                              agent=agent)
        sub.close()
        self.stats.subagents.append(sub.path)
        self.last = saved

    def _task_call(self) -> tuple[dict[str, Any], Any, Any, bool]:
        """A Task tool call; its subagent runs when its result is written."""
        r, t = self.rng, self.text
        agent = self._hex(8)
        tid = self._api_id("toolu_01")
        prompt = t.sentence() + " " + t.words(50, 400)
        report = t.sentence() + " " + t.words(100, 800)
        content = [{"type": "text", "text": report}]
        tur = {"status": "completed", "prompt": prompt, "agentId": agent, "content": content,
               "totalDurationMs": r.randint(5_000, 90_000),
               "totalTokens": r.randint(5_000, 60_000), "totalToolUseCount": r.randint(1, 9)}
        use = {"type": "tool_use", "id": tid, "name": "Task",
               "input": {"description": t.words(10, 30), "prompt": prompt,
                         "subagent_type": "general-purpose"}}
        return use, content, tur, False

    def run(self) -> GenStats:
        t0 = time.perf_counter()
        self._turn()
        while self.stats.bytes < self.target:
            if self.compact_at and self.stats.bytes >= self.compact_at[0]:
                self.compact_at.pop(0)
                self._compact()
            if self.rewind_at and self.stats.bytes >= self.rewind_at[0]:
                self.rewind_at.pop(0)
                self._rewind()
            if self.with_sidechains and self.rng.random() < 0.01:
                self._inline_sidechain()
            self._turn()
        self.main.close()
        self.stats.leaf = self.leaf
        self.stats.context = list(self.context)
        self.stats.seconds = time.perf_counter() - t0
        return self.stats


def generate(out_dir: Path, *, mb: float = 1.0, seed: int = 0, compactions: int = 3,
             rewinds: int = 4, subagents: bool = True, sidechains: bool = True,
             last_compaction_mb: float | None = None, preserve: bool = True) -> GenStats:
    """Write one transcript (and its subagent files) of about ``mb`` MB under ``out_dir``.

    Args:
        out_dir: the project folder; the transcript is ``<sessionId>.jsonl`` in it.
        mb: the target size of the main transcript, in MB (it ends after the turn that
            crosses it).
        seed: everything written follows from it.
        compactions, rewinds: how many of each, spread over the file.
        subagents: write Task calls with ``<sessionId>/subagents/agent-*.jsonl`` files.
        sidechains: write legacy inline sidechains in the main file.
        last_compaction_mb: put the latest compaction this many MB before the end.
        preserve: let about half the compactions keep the last turn (a preserved segment).

    Returns:
        :class:`GenStats`, with the leaf and the expected context.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    within = None if last_compaction_mb is None else int(last_compaction_mb * MB)
    gen = _Gen(out_dir, seed, int(mb * MB), compactions, rewinds, subagents, sidechains, within,
               preserve)
    return gen.run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path, help="the project folder to write into")
    ap.add_argument("--mb", type=float, default=100.0, help="target size in MB (100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compactions", type=int, default=4)
    ap.add_argument("--rewinds", type=int, default=6)
    ap.add_argument("--no-subagents", action="store_true")
    ap.add_argument("--no-sidechains", action="store_true")
    ap.add_argument("--last-compaction-mb", type=float, default=None,
                    help="put the latest compaction this many MB before the end")
    args = ap.parse_args(argv)
    stats = generate(args.out_dir, mb=args.mb, seed=args.seed, compactions=args.compactions,
                     rewinds=args.rewinds, subagents=not args.no_subagents,
                     sidechains=not args.no_sidechains,
                     last_compaction_mb=args.last_compaction_mb)
    print(stats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
