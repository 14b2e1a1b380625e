"""Synthetic pi (session format v3) session generator for benchmarks.

Writes realistic JSONL session files of a target size: a header line, an initial
``model_change`` / ``thinking_level_change``, then conversation turns (user message,
assistant messages with thinking / text / tool calls, one ``toolResult`` per tool call),
periodic ``compaction`` entries (optionally followed by the current settings), a few
branches (optionally with a ``branch_summary``), labels, one ``session_info`` and a
sprinkling of ``custom`` / ``custom_message`` / ``bashExecution`` entries.

Every entry uses pi's key order (see pi's ``all-types.jsonl``, in ``../shared/fixtures/pi``).
Output is deterministic for a given seed: all randomness comes from one ``random.Random(seed)`` and
timestamps advance from a fixed start time.

Invariants of the generated file:

* ids are 8 lowercase hex characters, unique in the file; every ``parentId`` names an
  earlier entry (only the first entry has ``parentId: null``);
* the active branch is the path from the root to the LAST entry of the file;
* every assistant tool call is followed immediately by exactly one ``toolResult`` per call
  (on every branch, so in particular on the active one);
* branches only go back to a turn end after the latest compaction, so every compaction
  written stays on the active branch, and its ``firstKeptEntryId`` is a user message on the
  path before it.

Speed comes from precomputed random text pools (tool results, thinking, text are slices of
them), ``orjson`` serialisation and large buffered writes.

CLI::

    python bench/gen_session.py OUT --size 100MB [--seed N] [--compaction-every 20MB]
                                [--tail-mb 5] [--branch-every 40]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson

KB = 1024
MB = 1024 * KB
GB = 1024 * MB

START_MS = 1768467600000  # 2026-01-15T09:00:00.000Z
CWD = "/home/user/project"
API = "anthropic-messages"
PROVIDER = "anthropic"
MODELS = ("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5")
# $ per token: input, output, cacheRead, cacheWrite
PRICES = {
    "claude-sonnet-4-5": (3e-6, 15e-6, 0.3e-6, 3.75e-6),
    "claude-opus-4-1": (15e-6, 75e-6, 1.5e-6, 18.75e-6),
    "claude-haiku-4-5": (1e-6, 5e-6, 0.1e-6, 1.25e-6),
}
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high")
SYSTEM_TOKENS = 4200  # the (cached) system prompt + tool definitions

_FLUSH_AT = 8 * MB
_DUMPS = orjson.dumps
_NL = orjson.OPT_APPEND_NEWLINE


# ---------------------------------------------------------------------------------------
# stats


@dataclass
class GenStats:
    """What :func:`generate` wrote.  ``entries`` excludes the header line."""

    path: str
    bytes: int = 0
    entries: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    by_role: dict[str, int] = field(default_factory=dict)
    turns: int = 0
    compactions: int = 0
    branches: int = 0
    last_compaction_id: str | None = None
    last_compaction_offset: int | None = None  # byte offset of the start of its line
    leaf_id: str | None = None
    seconds: float = 0.0

    def summary(self) -> str:
        mb = self.bytes / MB
        rate = mb / self.seconds if self.seconds > 0 else float("inf")
        lines = [
            f"path: {self.path}",
            f"bytes: {self.bytes} ({mb:.1f} MiB)",
            f"entries: {self.entries}  turns: {self.turns}",
            f"by type: {dict(sorted(self.by_type.items()))}",
            f"by role: {dict(sorted(self.by_role.items()))}",
            f"compactions: {self.compactions}  branches: {self.branches}",
            f"last compaction: {self.last_compaction_id} at byte {self.last_compaction_offset}"
            + (
                f" ({self.bytes - self.last_compaction_offset} bytes from the end)"
                if self.last_compaction_offset is not None
                else ""
            ),
            f"leaf: {self.leaf_id}",
            f"time: {self.seconds:.2f} s ({rate:.1f} MiB/s)",
        ]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# text pools

_WORDS = (
    "the a to of and in that is for it with as on be this by are from or at we "
    "function file test error value config update change handle return import module "
    "class method build cache session entry token parse write read path line branch "
    "compaction state context message result output input tool call check fix refactor "
    "should would could need first then next because instead already still only also "
    "behaviour edge case failing passing type interface schema field index offset buffer "
    "stream lock retry timeout handler parser writer reader snapshot projection tail "
    "header version migrate legacy current parent child leaf node tree summary usage "
    "cost model provider thinking level label custom extension hook event store append"
).split()

_IDENTS = (
    "session entry parser writer reader buffer offset index cache state context message "
    "result handler options config stream lock leaf parent child node tree summary usage "
    "token model path file line data value items count total store event"
).split()

_TYPES = ("string", "number", "boolean", "Entry", "Session", "Buffer", "Map<string, Entry>",
          "Promise<void>", "string[]", "Record<string, unknown>", "SessionEntry | undefined")

_DIRS = ("src", "src/core", "src/session", "src/tools", "src/utils", "src/cli", "test",
         "test/fixtures", "packages/agent/src", "packages/ai/src", "docs", "scripts")
_EXTS = ("ts", "ts", "ts", "tsx", "js", "json", "md", "py", "sh")

_CODE_TEMPLATES = (
    "import {{ {F} }} from \"./{i}\";",
    "import * as {i} from \"node:{i}\";",
    "export function {i}{F}({i}: {t}, {i}2?: {t}): {t} {{",
    "export async function {i}{F}({i}: {t}): Promise<{t}> {{",
    "export class {F}{F2} {{",
    "export interface {F}Options {{",
    "  readonly {i}: {t};",
    "  private {i}{F}: {t} | undefined;",
    "  constructor(private readonly {i}: {t}) {{}}",
    "  const {i} = await this.{i}{F}({i}, {n});",
    "  const {i}{F} = {i}.{i}({n});",
    "  let {i} = {n};",
    "  if (!{i}) {{",
    "  if ({i}.length > {n}) {{",
    "    return undefined;",
    "    throw new Error(`Invalid {i}: ${{{i}}}`);",
    "    {i}.push({{ type: \"{i}\", {i}: {i}{F} }});",
    "  for (const {i} of {i}{F}) {{",
    "  }} catch (err) {{",
    "    console.error(\"failed to {i} {i}\", err);",
    "  return {i}.map(({i}) => {i}.{i}).filter(Boolean);",
    "  // {w} {w} {w} {w} {w}",
    "  /** {W} {w} {w} {w}. */",
    "  }}",
    "}}",
    "",
    "def {i}_{i}({i}, {i}={n}):",
    "    \"\"\"{W} {w} {w} {w}.\"\"\"",
    "    {i} = self.{i}.get({i}, {n})",
    "    for {i} in {i}_{i}:",
    "        yield {i}[\"{i}\"]",
    "    return {i}",
    "\tcase \"{i}\": return {n};",
)

_LOG_TEMPLATES = (
    " \u2713 {p} ({n} ms)",
    " \u2713 {p} > {w} {w} {w} ({n}ms)",
    " \u00d7 {p} > {w} {w} {w} {n}ms",
    "   AssertionError: expected {n} to equal {n}",
    "{p}:{n}:{n} - error TS2345: Argument of type '{t}' is not assignable to '{t}'.",
    "{p}:{n}:  const {i} = {i}.{i}({n});",
    "{p}:{n}:export function {i}({i}: {t}) {{",
    "-rw-r--r--  1 user user {n} Jan 15 09:{n2} {i}.{e}",
    "drwxr-xr-x  {n2} user user 4096 Jan 15 09:{n2} {i}",
    "{h} {W} {w} {w} in {p}",
    " {p} | {n2} {plus}",
    "npm warn deprecated {i}@{n2}.{n2}.0: {W} {w} {w}",
    "  at {F}.{i} ({p}:{n}:{n2})",
    "Test Files  {n2} passed ({n2})",
    "     Tests  {n} passed | {n2} skipped ({n})",
    "",
)

_COMMANDS = (
    "npm test", "npm run build", "npm run check", "git status", "git diff --stat",
    "git log --oneline -20", "ls -la {d}", "npx tsc --noEmit", "npx vitest run {p}",
    "rg -n \"{i}\" {d}", "cat {p} | head -80", "wc -l {p}", "python -m pytest -q {p}",
    "node scripts/{i}.mjs --verbose", "find {d} -name '*.{e}' | head", "git diff {p}",
)

_ERRORS = (
    "Error: ENOENT: no such file or directory, open '{p}'",
    "Could not find the exact text in {p}. The old text must match exactly including all "
    "whitespace and newlines.",
    "Command exited with code 1",
    "Command timed out after 120 seconds",
    "Error: EACCES: permission denied, open '{p}'",
)

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_LABELS = ("checkpoint", "good state", "before refactor", "bug repro", "tests green", "WIP",
           "try again from here", "baseline")
_SESSION_NAMES = ("Refactor session store", "Fix compaction cut point", "Add tail reader",
                  "Speed up projection", "Port branch summaries")


def _fill(rng: random.Random, template: str) -> str:
    ch = rng.choice
    return template.format(
        i=ch(_IDENTS),
        F=ch(_IDENTS).capitalize(),
        F2=ch(_IDENTS).capitalize(),
        t=ch(_TYPES),
        n=rng.randint(0, 4000),
        n2=rng.randint(1, 59),
        w=ch(_WORDS),
        W=ch(_WORDS).capitalize(),
        d=ch(_DIRS),
        e=ch(_EXTS),
        p=f"{ch(_DIRS)}/{ch(_IDENTS)}.{ch(_EXTS)}",
        h=f"{rng.getrandbits(28):07x}",
        plus="+" * rng.randint(1, 30),
    )


_INTRO = {3: "label", 4: "custom", 5: "custom_message", 6: "bash"}
# cumulative probabilities per turn
_EXTRA_ODDS = ((0.05, "label"), (0.06, "thinking"), (0.065, "model"), (0.085, "custom"),
               (0.095, "custom_message"), (0.11, "bash"))
_EXTRA_KINDS = {"custom", "custom_message", "bash"}


class _Pools:
    """Big random strings; texts are slices of them (cheap: one memcpy each)."""

    def __init__(self, rng: random.Random) -> None:
        code_lines = [_fill(rng, t) for t in _CODE_TEMPLATES for _ in range(60)]
        self.code = "\n".join(rng.choices(code_lines, k=40_000)) + "\n"  # ~1.2 MB
        log_lines = [_fill(rng, t) for t in _LOG_TEMPLATES for _ in range(80)]
        self.log = "\n".join(rng.choices(log_lines, k=16_000)) + "\n"  # ~0.6 MB
        sentences = []
        for _ in range(600):
            words = rng.choices(_WORDS, k=rng.randint(5, 18))
            if rng.random() < 0.3:
                words[rng.randrange(len(words))] = f"`{rng.choice(_DIRS)}/{rng.choice(_IDENTS)}`"
            sentences.append(" ".join(words).capitalize() + rng.choice((".", ".", ".", "?", ":")))
        parts = rng.choices(sentences, k=5000)
        for j in range(0, len(parts), 7):
            parts[j] = parts[j] + "\n\n"
        self.prose = " ".join(parts)  # ~0.4 MB
        self.sig = "".join(rng.choices(_B64, k=64 * KB))
        self.paths = sorted(
            {f"{rng.choice(_DIRS)}/{rng.choice(_IDENTS)}{rng.choice(('', '-utils', 's'))}."
             f"{rng.choice(_EXTS)}" for _ in range(300)}
        )
        self.commands = [_fill(rng, c) for c in _COMMANDS for _ in range(8)]


def _slice(rng: random.Random, pool: str, n: int, sep: str = "\n") -> str:
    n = min(n, len(pool) - 1)
    start = rng.randrange(len(pool) - n)
    j = pool.find(sep, start, start + 200)
    if j >= 0:
        start = j + 1
    return pool[start:start + n]


def _iso(ms: int) -> str:
    t = time.gmtime(ms // 1000)
    return f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d}T{t[3]:02d}:{t[4]:02d}:{t[5]:02d}.{ms % 1000:03d}Z"


# ---------------------------------------------------------------------------------------
# generator


@dataclass(slots=True)
class _Turn:
    user_id: str
    end_id: str  # the final (stopReason "stop") assistant entry
    ctx_start: int  # context tokens before the user message
    ctx_end: int


class _Gen:
    def __init__(
        self,
        path: Path,
        target_bytes: int,
        seed: int,
        compaction_every_bytes: int | None,
        branch_every: int | None,
        tail: int | None,
        settings_after_compaction: bool,
        extras: bool,
    ) -> None:
        self.path = path
        self.target = target_bytes
        self.rng = random.Random(seed)
        self.pools = _Pools(self.rng)
        self.every = compaction_every_bytes
        self.branch_every = branch_every
        self.tail = tail
        self.settings_after = settings_after_compaction
        self.extras = extras

        self.ids: set[str] = set()
        self.clock = START_MS
        self.leaf: str | None = None
        self.ctx = 0  # conversation tokens in the current context (excluding system prompt)
        self.cache_warm = False
        self.model = MODELS[0]
        self.thinking = "high"
        self.turns: list[_Turn] = []  # turns on the active branch since the last compaction
        self.branch_floor = 0  # branch only to turns[k] with k >= this (keeps session_info)
        self.turn_no = 0
        self.read_files: set[str] = set()
        self.modified_files: set[str] = set()
        self.session_named = False

        self.pending: list[bytes] = []
        self.pending_len = 0
        self.pending_meta: list[tuple[str, str | None]] = []
        self.buf: list[bytes] = []
        self.buf_len = 0
        self.offset = 0
        self.f = None
        self.stats = GenStats(path=str(path))

    # -- low level -------------------------------------------------------------------

    def _id(self) -> str:
        getrandbits = self.rng.getrandbits
        ids = self.ids
        while True:
            i = f"{getrandbits(32):08x}"
            if i not in ids:
                ids.add(i)
                return i

    def _add(self, entry: dict, role: str | None = None) -> int:
        line = _DUMPS(entry, option=_NL)
        self.pending.append(line)
        self.pending_len += len(line)
        self.pending_meta.append((entry["type"], role))
        self.leaf = entry["id"]
        return len(line)

    def _commit(self) -> None:
        st = self.stats
        by_type = st.by_type
        by_role = st.by_role
        for etype, role in self.pending_meta:
            by_type[etype] = by_type.get(etype, 0) + 1
            if role is not None:
                by_role[role] = by_role.get(role, 0) + 1
        st.entries += len(self.pending)
        self.buf.extend(self.pending)
        self.buf_len += self.pending_len
        self.offset += self.pending_len
        self.pending = []
        self.pending_len = 0
        self.pending_meta = []
        if self.buf_len >= _FLUSH_AT:
            self._flush()

    def _flush(self) -> None:
        if self.buf:
            self.f.write(b"".join(self.buf))
            self.buf = []
            self.buf_len = 0

    def _tick(self, lo: int, hi: int) -> int:
        self.clock += self.rng.randint(lo, hi)
        return self.clock

    def _base(self, etype: str) -> dict:
        return {"type": etype, "id": self._id(), "parentId": self.leaf,
                "timestamp": _iso(self.clock)}

    # -- entries ---------------------------------------------------------------------

    def _settings(self) -> None:
        e = self._base("model_change")
        e["provider"] = PROVIDER
        e["modelId"] = self.model
        self._add(e)
        e = self._base("thinking_level_change")
        e["thinkingLevel"] = self.thinking
        self._add(e)
        self.cache_warm = False

    def _message(self, msg: dict) -> str:
        e = self._base("message")
        e["message"] = msg
        n = self._add(e, msg["role"])
        self.ctx += n // 4
        return e["id"]

    def _user(self) -> str:
        rng = self.rng
        p = self.pools
        r = rng.random()
        if r < 0.08:  # pasted code / log
            text = (_slice(rng, p.prose, rng.randint(40, 300), " ") + "\n\n```\n"
                    + _slice(rng, p.code if r < 0.05 else p.log, rng.randint(2 * KB, 20 * KB))
                    + "\n```")
        else:
            text = _slice(rng, p.prose, int(rng.triangular(15, 1500, 120)), " ")
        ts = self._tick(5_000, 240_000)
        return self._message({"role": "user", "content": [{"type": "text", "text": text}],
                              "timestamp": ts})

    def _tool_call(self) -> tuple[dict, str]:
        """A toolCall block plus the result kind."""
        rng = self.rng
        p = self.pools
        name = rng.choices(("read", "bash", "edit", "grep", "write"), (35, 25, 20, 10, 10))[0]
        path = rng.choice(p.paths)
        if name == "read":
            args: dict = {"path": path}
            if rng.random() < 0.2:
                args["offset"] = rng.randint(1, 800)
                args["limit"] = rng.choice((50, 100, 200))
            self.read_files.add(path)
        elif name == "bash":
            args = {"command": rng.choice(p.commands)}
            if rng.random() < 0.15:
                args["timeout"] = rng.choice((60, 120, 300))
        elif name == "edit":
            args = {"path": path,
                    "oldText": _slice(rng, p.code, int(rng.triangular(30, 2500, 200))),
                    "newText": _slice(rng, p.code, int(rng.triangular(30, 3000, 250)))}
            self.modified_files.add(path)
        elif name == "grep":
            args = {"pattern": rng.choice(_IDENTS) + rng.choice(("", "\\(", "Entry", ".*")),
                    "path": rng.choice(_DIRS)}
            if rng.random() < 0.3:
                args["glob"] = "*." + rng.choice(_EXTS)
        else:
            args = {"path": path,
                    "content": _slice(rng, p.code, int(rng.triangular(200, 20 * KB, 2 * KB)))}
            self.modified_files.add(path)
        block = {"type": "toolCall", "id": f"toolu_01{rng.getrandbits(88):022x}", "name": name,
                 "arguments": args}
        return block, name

    def _tool_result_text(self, name: str, args: dict) -> tuple[str, bool]:
        rng = self.rng
        p = self.pools
        if rng.random() < 0.06:
            text = _ERRORS[rng.randrange(len(_ERRORS))].format(p=args.get("path", "."))
            if name == "bash":
                text = _slice(rng, p.log, rng.randint(100, 3000)) + "\n\n" + text
            return text, True
        if name == "edit":
            return f"Successfully replaced text in {args['path']}.", False
        if name == "write":
            return f"Successfully wrote {len(args['content'])} bytes to {args['path']}", False
        r = rng.random()
        if r < 0.75:
            n = rng.randint(40, 3000)
        elif r < 0.97:
            n = rng.randint(5 * KB, 50 * KB)
        else:
            n = rng.randint(200 * KB, 400 * KB)
        pool = p.code if name == "read" else p.log
        return _slice(rng, pool, n), False

    def _assistant(self, final: bool) -> tuple[str, list[dict]]:
        rng = self.rng
        p = self.pools
        content: list[dict] = []
        if self.thinking != "off" and rng.random() < 0.7:
            content.append({"type": "thinking",
                            "thinking": _slice(rng, p.prose, int(rng.triangular(60, 4000, 400)),
                                               " "),
                            "thinkingSignature": _slice(rng, p.sig, rng.randint(300, 1200))})
        if final or rng.random() < 0.6:
            n = int(rng.triangular(200, 4000, 600)) if final else rng.randint(20, 300)
            content.append({"type": "text", "text": _slice(rng, p.prose, n, " ")})
        calls = []
        kinds = []
        if not final:
            for _ in range(rng.choice((1, 1, 1, 1, 2, 2, 3))):
                block, name = self._tool_call()
                calls.append(block)
                kinds.append(name)
            content.extend(calls)
        start = self._tick(200, 3_000)
        self._tick(1_000, 40_000)
        out_tokens = max(1, len(orjson.dumps(content)) // 4 + rng.randint(0, 40))
        usage = self._usage(out_tokens)
        mid = self._message({"role": "assistant", "content": content, "api": API,
                             "provider": PROVIDER, "model": self.model, "usage": usage,
                             "stopReason": "toolUse" if calls else "stop", "timestamp": start})
        return mid, calls

    def _usage(self, output: int) -> dict:
        price_in, price_out, price_cr, price_cw = PRICES[self.model]
        inp = self.ctx + self.rng.randint(0, 30)
        if self.cache_warm:
            cache_read, cache_write = SYSTEM_TOKENS, 0
        else:
            cache_read, cache_write = 0, SYSTEM_TOKENS
            self.cache_warm = True
        ci = inp * price_in
        co = output * price_out
        ccr = cache_read * price_cr
        ccw = cache_write * price_cw
        return {"input": inp, "output": output, "cacheRead": cache_read,
                "cacheWrite": cache_write, "totalTokens": inp + output + cache_read + cache_write,
                "cost": {"input": ci, "output": co, "cacheRead": ccr, "cacheWrite": ccw,
                         "total": ci + co + ccr + ccw}}

    def _turn(self) -> None:
        rng = self.rng
        ctx_start = self.ctx
        user_id = self._user()
        steps = rng.choices((0, 1, 2, 3, 4, 6, 9), (15, 20, 20, 15, 12, 12, 6))[0]
        for step in range(steps + 1):
            mid, calls = self._assistant(final=step == steps)
            for block in calls:
                text, is_error = self._tool_result_text(block["name"], block["arguments"])
                ts = self._tick(10, 8_000)
                self._message({"role": "toolResult", "toolCallId": block["id"],
                               "toolName": block["name"],
                               "content": [{"type": "text", "text": text}],
                               "isError": is_error, "timestamp": ts})
        self.turns.append(_Turn(user_id, mid, ctx_start, self.ctx))

    def _branch(self) -> None:
        rng = self.rng
        turns = self.turns
        k = rng.randrange(max(self.branch_floor, len(turns) - 6), len(turns) - 1)
        target = turns[k]
        del turns[k + 1:]
        self.ctx = target.ctx_end
        self.leaf = target.end_id
        self._tick(2_000, 60_000)
        if self.stats.branches == 0 or rng.random() < 0.5:
            p = self.pools
            summary = ("The user explored a different conversation branch before returning "
                       "here.\nSummary of that exploration:\n\n" + self._summary_md(small=True))
            e = self._base("branch_summary")
            e["fromId"] = target.end_id
            e["summary"] = summary
            e["details"] = {"readFiles": sorted(rng.sample(p.paths, rng.randint(0, 4))),
                            "modifiedFiles": sorted(rng.sample(p.paths, rng.randint(0, 2)))}
            e["fromHook"] = False
            self.ctx += self._add(e) // 4
        self.stats.branches += 1

    def _between_turns(self) -> None:
        rng = self.rng
        p = self.pools
        if (self.branch_every and self.turn_no % self.branch_every == 0
                and len(self.turns) >= self.branch_floor + 2):
            self._branch()
        if not self.session_named:
            e = self._base("session_info")
            e["name"] = rng.choice(_SESSION_NAMES)
            self._add(e)
            self.session_named = True
            self.branch_floor = len(self.turns)
        # the first few turns get one of each rarer entry kind, later ones are random
        kind = _INTRO.get(self.turn_no)
        if kind is None:
            r = rng.random()
            kind = next((k for p_, k in _EXTRA_ODDS if r < p_), None)
        if kind is None or (kind in _EXTRA_KINDS and not self.extras):
            return
        if kind == "label":
            e = self._base("label")
            if self.turns:
                t = rng.choice(self.turns)
                e["targetId"] = t.user_id if rng.random() < 0.6 else t.end_id
            else:
                e["targetId"] = self.leaf
            e["label"] = rng.choice(_LABELS)
            self._add(e)
        elif kind == "thinking":
            self.thinking = rng.choice(THINKING_LEVELS)
            e = self._base("thinking_level_change")
            e["thinkingLevel"] = self.thinking
            self._add(e)
        elif kind == "model":
            self.model = rng.choice(MODELS)
            e = self._base("model_change")
            e["provider"] = PROVIDER
            e["modelId"] = self.model
            self._add(e)
            self.cache_warm = False
        elif kind == "custom":
            e = {"type": "custom", "customType": "todo",
                 "data": {"items": rng.sample(_IDENTS, rng.randint(1, 6)),
                          "done": rng.randint(0, 6)},
                 "id": self._id(), "parentId": self.leaf, "timestamp": _iso(self.clock)}
            self._add(e)
        elif kind == "custom_message":
            e = {"type": "custom_message", "customType": "reminder",
                 "content": _slice(rng, p.prose, rng.randint(40, 600), " "),
                 "display": rng.random() < 0.5,
                 "id": self._id(), "parentId": self.leaf, "timestamp": _iso(self.clock)}
            self.ctx += self._add(e) // 4
        else:  # bashExecution: a command the user ran with "!"
            ts = self._tick(1_000, 30_000)
            out = _slice(rng, p.log, rng.randint(0, 4000))
            self._message({"role": "bashExecution", "command": rng.choice(p.commands),
                           "output": out, "exitCode": rng.choice((0, 0, 0, 1)),
                           "cancelled": False, "truncated": False, "timestamp": ts})

    def _summary_md(self, small: bool = False) -> str:
        rng = self.rng
        p = self.pools

        def prose(lo: int, hi: int) -> str:
            return _slice(rng, p.prose, rng.randint(lo, hi), " ").replace("\n", " ").strip()

        def bullets(prefix: str, n_lo: int, n_hi: int, lo: int = 40, hi: int = 160) -> str:
            return "\n".join(f"{prefix}{prose(lo, hi)}" for _ in range(rng.randint(n_lo, n_hi)))

        if small:
            return (f"## Goal\n{prose(80, 300)}\n\n## Progress\n{bullets('- ', 1, 4)}\n\n"
                    f"## Outcome\n{prose(60, 300)}")
        return (
            f"## Goal\n{prose(150, 500)}\n\n"
            f"## Constraints & Preferences\n{bullets('- ', 2, 4)}\n\n"
            f"## Progress\n### Done\n{bullets('- [x] ', 3, 9)}\n\n"
            f"### In Progress\n{bullets('- [ ] ', 1, 3)}\n\n### Blocked\n- (none)\n\n"
            f"## Key Decisions\n{bullets('- **Decision**: ', 2, 5, 60, 240)}\n\n"
            f"## Next Steps\n{bullets('1. ', 2, 5)}\n\n"
            f"## Critical Context\n{bullets('- ', 1, 4, 80, 400)}"
        )

    def _compact(self) -> None:
        rng = self.rng
        turns = self.turns
        first = turns[-rng.randint(1, min(4, len(turns)))]
        modified = sorted(self.modified_files)
        read = sorted(self.read_files - self.modified_files)
        summary = self._summary_md()
        if read:
            summary += "\n\n<read-files>\n" + "\n".join(read) + "\n</read-files>"
        if modified:
            summary += "\n\n<modified-files>\n" + "\n".join(modified) + "\n</modified-files>"
        self._tick(15_000, 90_000)
        e = self._base("compaction")
        e["summary"] = summary
        e["firstKeptEntryId"] = first.user_id
        e["tokensBefore"] = SYSTEM_TOKENS + self.ctx
        e["details"] = {"readFiles": read, "modifiedFiles": modified}
        e["fromHook"] = False
        offset = self.offset + self.pending_len
        n = self._add(e)
        self.ctx = n // 4 + (self.ctx - first.ctx_start)
        self.cache_warm = False
        if self.settings_after:
            self._settings()
        self._commit()
        st = self.stats
        st.compactions += 1
        st.last_compaction_id = e["id"]
        st.last_compaction_offset = offset
        self.turns = []
        self.branch_floor = 0
        self.read_files = set()
        self.modified_files = set()

    # -- driver ----------------------------------------------------------------------

    def run(self, t0: float) -> GenStats:
        rng = self.rng
        st = self.stats
        with open(self.path, "wb") as f:
            self.f = f
            header = {"type": "session", "version": 3,
                      "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                      "timestamp": _iso(self.clock), "cwd": CWD}
            line = _DUMPS(header, option=_NL)
            self.buf.append(line)
            self.buf_len = self.offset = len(line)
            self._settings()
            self._commit()

            tail = self.tail
            force_at = None if tail is None else self.target - tail // 2
            final_done = False
            final_offset = 0
            last_compaction_end = self.offset
            while True:
                if self.offset >= self.target and (tail is None or final_done):
                    break
                leaf, branches = self.leaf, st.branches
                self.turn_no += 1
                if self.turn_no > 1:
                    self._between_turns()
                self._turn()
                if final_done and self.offset + self.pending_len > final_offset + tail:
                    # keep the final compaction within the last `tail` bytes: drop this turn
                    self.pending, self.pending_len, self.pending_meta = [], 0, []
                    self.leaf, st.branches = leaf, branches
                    break
                self._commit()
                st.turns += 1
                if force_at is not None and not final_done and self.offset >= force_at:
                    self._compact()
                    final_done = True
                    final_offset = st.last_compaction_offset
                elif (not final_done and self.every
                      and self.offset - last_compaction_end >= self.every):
                    self._compact()
                    last_compaction_end = self.offset
            self._flush()
        st.bytes = self.offset
        st.leaf_id = self.leaf
        st.seconds = time.perf_counter() - t0
        return st


def generate(
    path: str | Path,
    *,
    target_bytes: int,
    seed: int = 0,
    compaction_every_bytes: int | None = 20 * MB,
    branch_every: int | None = 40,
    last_compaction_within_bytes: int | None = None,
    settings_after_compaction: bool = True,
    extras: bool = True,
) -> GenStats:
    """Write a synthetic pi v3 session of about ``target_bytes`` bytes to ``path``.

    ``compaction_every_bytes``: bytes between compactions (None/0: none, except the final one
    requested by ``last_compaction_within_bytes``).  ``branch_every``: every N-th turn starts
    from an earlier turn end (None/0: no branches).  ``last_compaction_within_bytes=N``: the
    last compaction starts within the last N bytes of the file (the file may then end a
    little short of ``target_bytes``).  ``settings_after_compaction``: write a
    ``model_change`` and ``thinking_level_change`` right after each compaction.
    ``extras``: also write occasional ``custom``, ``custom_message`` and ``bashExecution``
    entries.
    """
    if target_bytes <= 0:
        raise ValueError("target_bytes must be positive")
    if last_compaction_within_bytes is not None and last_compaction_within_bytes <= 0:
        raise ValueError("last_compaction_within_bytes must be positive")
    t0 = time.perf_counter()
    gen = _Gen(Path(path), target_bytes, seed, compaction_every_bytes, branch_every,
               last_compaction_within_bytes, settings_after_compaction, extras)
    return gen.run(t0)


# ---------------------------------------------------------------------------------------
# CLI

_UNITS = {"": 1, "B": 1, "K": KB, "KB": KB, "KIB": KB, "M": MB, "MB": MB, "MIB": MB,
          "G": GB, "GB": GB, "GIB": GB}


def parse_size(text: str) -> int:
    """'100MB' -> 104857600 (binary units; K/M/G, optional B / iB; plain number = bytes)."""
    s = text.strip().upper().replace("_", "")
    i = len(s)
    while i > 0 and not (s[i - 1].isdigit() or s[i - 1] == "."):
        i -= 1
    num, unit = s[:i].strip(), s[i:].strip()
    if not num or unit not in _UNITS:
        raise ValueError(f"bad size: {text!r}")
    return int(float(num) * _UNITS[unit])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate a synthetic pi v3 session file.")
    ap.add_argument("out", help="output .jsonl path")
    ap.add_argument("--size", type=parse_size, default=parse_size("100MB"),
                    help="target size, e.g. 100MB, 1GB (default 100MB)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compaction-every", type=parse_size, default=20 * MB,
                    help="bytes between compactions (0: none); default 20MB")
    ap.add_argument("--branch-every", type=int, default=40,
                    help="branch every N turns (0: never); default 40")
    ap.add_argument("--tail-mb", type=float, default=None,
                    help="put the last compaction within the last N MiB of the file")
    ap.add_argument("--no-settings-after-compaction", action="store_true",
                    help="do not write model/thinking changes after each compaction")
    ap.add_argument("--no-extras", action="store_true",
                    help="no custom / custom_message / bashExecution entries")
    a = ap.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(folder):
        print(f"Error: {folder}: no such folder (make it first, or name another)",
              file=sys.stderr)
        return 2
    stats = generate(
        a.out,
        target_bytes=a.size,
        seed=a.seed,
        compaction_every_bytes=a.compaction_every or None,
        branch_every=a.branch_every or None,
        last_compaction_within_bytes=None if a.tail_mb is None else int(a.tail_mb * MB),
        settings_after_compaction=not a.no_settings_after_compaction,
        extras=not a.no_extras,
    )
    print(stats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
