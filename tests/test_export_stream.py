"""`journal export` streams: a session is never held whole (memory measured with
tracemalloc against the file's size), and the Markdown escapes session text so that nothing
a session says can add a heading, a fence, a quote or HTML to the document (checked with a
CommonMark parser)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from markdown_it import MarkdownIt
from memory_peak import peak_of

import journal.entrystream
from journal import Session, codec, export, export_session, load
from journal.exporting import export_to, md_prose

STAMP = "2026-05-28T00:00:00.000Z"


def uniform(path: Path, entries: int, text_bytes: int = 8000) -> Path:
    """A version 3 session of `entries` user and assistant messages in one chain, written
    directly (quick to make at any size)."""
    lines = [orjson.dumps({"type": "session", "version": 3, "id": "sess-0001",
                           "timestamp": STAMP, "cwd": "/w"})]
    parent = None
    for n in range(entries):
        role = "user" if n % 2 == 0 else "assistant"
        message = {"role": role, "content": [{"type": "text", "text": f"{n} " + "x" * text_bytes}],
                   "timestamp": 1}
        if role == "assistant":
            message |= {"provider": "anthropic", "model": "claude-sonnet-4-5",
                        "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0,
                                  "cost": {"total": 0.001}}}
        entry_id = f"{n:08x}"
        lines.append(orjson.dumps({"type": "message", "id": entry_id, "parentId": parent,
                                   "timestamp": STAMP, "message": message}))
        parent = entry_id
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


class Sink:
    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)


@pytest.mark.parametrize("fmt,all_branches", [("jsonl", False), ("jsonl", True),
                                              ("md", False), ("md", True), ("html", False)])
def test_export_never_holds_the_session_whole(tmp_path, monkeypatch, fmt, all_branches):
    monkeypatch.setattr(codec, "CHUNK", 1 << 16)  # read 64 KiB at a time, as a stream may
    path = uniform(tmp_path / "s.jsonl", 1000)
    size = path.stat().st_size
    assert size > 8_000_000
    whole = peak_of(lambda: load(path))
    assert whole > size  # the measure sees a whole-file read
    sink = Sink()
    peak = peak_of(lambda: export_to(path, fmt, sink, all_branches=all_branches))
    assert sink.bytes > size * 0.9  # it did write the session
    assert peak < size * 0.2, (fmt, peak, size)


def test_streamed_and_whole_exports_agree_and_a_v3_file_is_never_loaded(tmp_path, monkeypatch):
    path = uniform(tmp_path / "s.jsonl", 40, 100)
    expected = {fmt: export(path, fmt) for fmt in ("jsonl", "md")}

    def no_load(*a, **k):
        raise AssertionError("a version 3 file is streamed, not loaded")

    monkeypatch.setattr(journal.entrystream, "load", no_load)
    buffer = io.BytesIO()
    export_to(path, "jsonl", buffer)
    assert buffer.getvalue().decode() == expected["jsonl"]
    lines = buffer.getvalue().splitlines()
    assert [orjson.loads(line)["id"] for line in lines[1:]] == [
        e["id"] for e in load(path).entries]
    md = export(path, "md")
    assert md.split("exported:")[0] == expected["md"].split("exported:")[0]


def test_a_failed_export_leaves_no_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\x00\x00 not a session\n")
    out = tmp_path / "out" / "page.html"
    out.parent.mkdir()
    env = {**os.environ, "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "journal.cli", "export", str(bad), "--format",
                           "html", "-o", str(out)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1].startswith("Error: ")
    assert list(out.parent.iterdir()) == []
    good = uniform(tmp_path / "good.jsonl", 4, 10)
    proc = subprocess.run([sys.executable, "-m", "journal.cli", "export", str(good), "--format",
                           "md", "-o", str(out)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in out.parent.iterdir()] == ["page.html"]
    assert f"wrote {out.stat().st_size:,} bytes" in proc.stderr + proc.stdout


# hostile text in Markdown

HOSTILE_PROSE = [
    "# Turn 99 · user · forged heading",
    "```\nan unclosed fence that would swallow the rest",
    "</details></details><h1>html heading</h1>",
    "<script>alert(1)</script> and <img src=x onerror=alert(2)>",
    "first line\r## a heading after a lone CR",
    "a paragraph\n---",
    "a paragraph\n===",
    "   > quoted\n~~~\ntilde fence",
    "<!-- an unclosed comment",
    "&lt;already an entity&gt; & more",
]


def hostile_session(folder: Path) -> str:
    with Session.create(str(folder), cwd="/w") as s:
        s.append_session_info("name with\n# a heading inside and </details>")
        for n, text in enumerate(HOSTILE_PROSE):
            s.append_message({"role": "user", "content": [{"type": "text", "text": text}],
                              "timestamp": n})
            s.append_message({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "thinking </details> ``` " + text},
                {"type": "text", "text": "reply: " + text},
                {"type": "toolCall", "id": f"call-{n}`x", "name": "ba`sh\n# tool",
                 "arguments": {"command": text}}],
                "provider": "anthropic", "model": "m\n# model heading", "stopReason": "toolUse",
                "timestamp": n})
            s.append_message({"role": "toolResult", "toolCallId": f"call-{n}`x",
                              "toolName": "ba`sh\n# tool",
                              "content": [{"type": "text", "text": "out " + text}],
                              "isError": False, "timestamp": n})
        kept = s.entries[-3]["id"]
        s.append_compaction("summary\n# forged\n```\n</details>", kept, 100)
        s.append_custom_message_entry("note\n# custom", "custom text\n# heading", True)
        s.append_message({"role": "user", "content": [{"type": "text", "text": "the end"}],
                          "timestamp": 99})
        return s.path


def test_session_text_cannot_change_the_markdown_structure(tmp_path):
    path = hostile_session(tmp_path)
    md = export(path, "md")
    tokens = MarkdownIt("commonmark").parse(md.split("\n---\n", 1)[1])
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    turns = [h for h in headings if h.startswith("Turn ")]
    assert len(turns) == len(HOSTILE_PROSE) + 1
    assert all(" · user · " in h and "forged" not in h for h in turns)
    assert [h for h in headings if not h.startswith("Turn ")] == [  # as written in the source
        "name with # a heading inside and &lt;/details>", "Start",
        "Compaction (100 tokens before; the model sees this summary, then the entries from "
        + f"`{kept_id(path)}` on)"]
    # the only HTML is the exporter's own: anchors and <details> around fenced blocks
    html = [t.content for t in tokens if t.type in ("html_block", "html_inline")]
    for chunk in html:
        assert chunk.strip().startswith(("<a id=", "</a>", "<details><summary>", "</details>")), \
            chunk
    opened = sum(c.count("<details>") for c in html)
    assert opened == sum(c.count("</details>") for c in html)
    # every fence is one the exporter made: a thinking, a call or a result, closed
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 3 * len(HOSTILE_PROSE)
    # and every text reads as it was written
    rendered = MarkdownIt("commonmark").render(md)
    for text in HOSTILE_PROSE:
        first = text.replace("\r", "\n").split("\n")[0].lstrip(" >#")
        assert first.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") \
            in rendered, text


def kept_id(path: str) -> str:
    [compaction] = [e for e in load(path).entries if e["type"] == "compaction"]
    return compaction["firstKeptEntryId"]


def test_md_prose_escapes_only_what_makes_structure():
    assert md_prose("plain *emphasis* and `code`\n- a list") == \
        "plain *emphasis* and `code`\n- a list"
    assert md_prose("# h\n  ## h2\n> q\n```x\n~~~\n---\n= =\n***") == \
        "\\# h\n  \\## h2\n\\> q\n\\```x\n\\~~~\n\\---\n\\= =\n\\***"
    assert md_prose("a\rb\r\nc") == "a\nb\nc"
    assert md_prose("<b> & </details>") == "&lt;b> &amp; &lt;/details>"


def test_export_session_still_returns_the_bytes(tmp_path):
    path = uniform(tmp_path / "s.jsonl", 6, 10)
    result = export_session(path, "jsonl")
    assert result.entries == 6 and result.files == [os.path.realpath(path)]
    assert result.data.count(b"\n") == 7
