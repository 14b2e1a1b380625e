"""`journal export`: Markdown, one self-contained HTML page, JSONL; a rotated lineage as one
session; redaction; escaping; damaged files; and the page rendered by a real browser."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest
from corruption import gen_session_module
from test_rotate import build_session

from journal import Session, export, export_session, load, rotate
from journal.cli import main
from journal.context import build_context
from journal.exporting import redact_text
from journal.pairing import synthetic_result
from journal.tree import Tree

HOSTILE = "</script><img src=x onerror=alert(1)><!-- <script>alert(2)</script>"
SECRET_KEY = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8" * 3
EMAIL = "alice.smith@example.org"
LONG_OUTPUT = "\n".join(f"line {n} of the long output" for n in range(200))


def tool_turn(s: Session, call_id: str, text: str, output: str, *, usage: bool = True) -> None:
    s.append_message({"role": "user", "content": [{"type": "text", "text": text}],
                      "timestamp": 5})
    message = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "let me think about " + text},
                    {"type": "text", "text": "running it " + HOSTILE},
                    {"type": "toolCall", "id": call_id, "name": "bash",
                     "arguments": {"command": "cat notes.txt ```"}}],
        "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": "toolUse",
        "timestamp": 6,
    }
    if usage:
        message["usage"] = {"input": 100, "output": 20, "cacheRead": 5, "cacheWrite": 7,
                            "cost": {"total": 0.25}}
    s.append_message(message)
    s.append_message({"role": "toolResult", "toolCallId": call_id, "toolName": "bash",
                      "content": [{"type": "text", "text": output}], "isError": False,
                      "timestamp": 7})


def rotated_session(directory: Path) -> tuple[str, str]:
    """A session with compactions, a side branch, labels, tool calls and results, a
    synthetic result, a repair marker and hostile text, rotated once into a .gz archive
    and continued; returns (archive, live)."""
    s, _ = build_session(directory)
    tool_turn(s, "call-before", "before rotation " + EMAIL, "result before " + SECRET_KEY)
    s.close()
    result = rotate(s.path)
    assert result.rotated and result.archive.endswith(".gz")
    with Session.open(result.successor) as s2:
        tool_turn(s2, "call-long", "after rotation", LONG_OUTPUT)
        dangling = {"type": "toolCall", "id": "call-lost", "name": "read",
                    "arguments": {"path": "x"}}
        s2.append_message({"role": "assistant", "content": [dangling], "provider": "anthropic",
                           "model": "claude-opus-4-1", "stopReason": "toolUse", "timestamp": 8})
        s2.append_message(synthetic_result(dangling, 9))
        s2.append_custom_entry("journal.repair", {"leaf": "x", "reason": "test marker"})
        s2.append_message({"role": "user", "content": [{"type": "text", "text": "the very end"}],
                           "timestamp": 10})
        live = s2.path
    return result.archive, live


@pytest.fixture
def lineage_pair(tmp_path: Path) -> tuple[str, str]:
    return rotated_session(tmp_path / "s")


def entry_ids(paths: list[str]) -> set[str]:
    return {e["id"] for p in paths for e in load(p).entries}


# Markdown


def test_markdown_front_matter_turns_and_lineage(lineage_pair):
    archive, live = lineage_pair
    md = export(live, "md")
    front, _, body = md.partition("\n---\n")
    assert front.startswith("---\n")
    assert 'name: "rotation test"' in front
    assert "claude-sonnet-4-5" in front and "claude-opus-4-1" in front
    assert "cost: 0.5" in front  # recorded on the two assistant messages, each once
    assert "input: 200" in front
    assert archive in front and live in front
    # one heading per turn, in order, across the archive and the live file
    turns = re.findall(r"^## Turn (\d+)", body, re.M)
    assert turns == [str(n) for n in range(1, len(turns) + 1)] and len(turns) >= 6
    # each entry once although the successor repeats the kept entries of the archive
    anchors = re.findall(r'<a id="([^"]+)"></a>', body)
    assert len(anchors) == len(set(anchors))
    assert set(anchors) & {e["id"] for e in load(archive).entries}
    # the compaction summary is shown, and the entries it replaced are marked
    assert "### Compaction (1000 tokens before" in body and "> summary 0" in body
    assert "*(replaced by a later compaction)*" in body


def test_markdown_fences_tool_calls_and_folds_long_output(lineage_pair):
    _, live = lineage_pair
    md = export(live, "md")
    # the call's arguments contain ``` so the fence is longer
    assert '````json\n{\n  "command": "cat notes.txt ```"\n}\n````' in md
    assert "**Result** of `bash` (call-before, ok)" in md
    assert "<details><summary>**Result** of `bash` (call-long, ok)" in md
    assert "line 199 of the long output" in md
    assert "(synthetic: no result was recorded)" in md
    assert "*Repair marker*" in md
    assert "<details><summary>Thinking</summary>" in md


def test_markdown_live_branch_by_default_every_branch_on_request(lineage_pair):
    _, live = lineage_pair
    assert "side answer" not in export(live, "md")
    every = export(live, "md", all_branches=True)
    assert "side answer" in every
    assert re.search(r"^## Branch ending at `[^`]+`", every, re.M)


# JSONL


def test_jsonl_is_the_whole_lineage_as_one_session(lineage_pair, tmp_path):
    archive, live = lineage_pair
    out = tmp_path / "one.jsonl"
    out.write_text(export(live, "jsonl"))
    snap = load(out)
    assert not snap.diagnostics
    ids = [e["id"] for e in snap.entries]
    assert len(ids) == len(set(ids))
    assert "parentSession" not in snap.header
    # the exported branch projects to what the live session gives the model
    mine = build_context(Tree(snap.entries), ids[-1])
    with Session.open(live) as s:
        expected = s.context()
    assert mine.messages == expected.messages
    # every branch: every id of every file, once
    out.write_text(export(live, "jsonl", all_branches=True))
    every = [e["id"] for e in load(out).entries]
    assert len(every) == len(set(every))
    lineage_ids = entry_ids([archive, live])
    seals = {e["id"] for e in load(archive).entries if e.get("customType") == "journal.successor"}
    assert set(every) == lineage_ids - seals


# redaction and escaping


def test_redaction_in_every_format(lineage_pair):
    _, live = lineage_pair
    for fmt in ("md", "html", "jsonl"):
        plain = export(live, fmt)
        assert SECRET_KEY in plain and EMAIL in plain
        text = export(live, fmt, redact=True)
        assert SECRET_KEY not in text and EMAIL not in text, fmt
        assert "[REDACTED:anthropic-key]" in text and "[REDACTED:email]" in text, fmt


def test_redact_text_kinds():
    text = (f"key {SECRET_KEY} aws AKIAABCDEFGHIJKLMNOP gh ghp_{'a' * 36} "
            "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345 mail bob@corp.io ok")
    out = redact_text(text)
    for kind in ("anthropic-key", "aws-key", "github-token", "bearer", "email"):
        assert f"[REDACTED:{kind}]" in out
    assert out.endswith(" ok") and "AKIA" not in out and "bob@" not in out


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_html_is_self_contained_and_escapes_session_text(lineage_pair):
    _, live = lineage_pair
    page = export(live, "html")
    assert HOSTILE not in page and "</script><img" not in page
    parser = _Tags()
    parser.feed(page)
    tags = [t for t, _ in parser.tags]
    assert "img" not in tags
    assert tags.count("script") == 3  # metadata, the session, the page's code
    for _, attrs in parser.tags:
        for name in ("src", "href"):
            assert attrs.get(name) is None, attrs
    csp = [a for t, a in parser.tags if t == "meta" and a.get("http-equiv")]
    assert csp and "default-src 'none'" in (csp[0]["content"] or "")
    # the embedded session reads back to the entries, hostile text intact
    raw = page.split('<script type="application/json" id="jsonl">', 1)[1].split("</script>")[0]
    lines = [orjson.loads(line) for line in raw.split("\n") if line]
    assert lines[0]["type"] == "session"
    assert any(HOSTILE in orjson.dumps(e).decode() for e in lines)


# damage and errors


def test_unreadable_archive_and_damaged_lines_are_warnings(lineage_pair):
    archive, live = lineage_pair
    with open(live, "ab") as f:
        f.write(b'{"type": "message", "id": broken\n')
    with open(archive, "r+b") as f:
        f.seek(20)
        f.write(b"\x00garbage\x00" * 8)
    result = export_session(live, "md")
    assert any(archive in w for w in result.warnings)
    assert any(live in w and "line" in w for w in result.warnings)
    assert "the very end" in result.text


def test_cli_export_writes_files_and_reports(lineage_pair, tmp_path, capsys):
    _, live = lineage_pair
    out = tmp_path / "page.html"
    assert main(["export", live, "--format", "html", "-o", str(out), "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["path"] == str(out) and report["bytes"] == out.stat().st_size
    assert len(report["files"]) == 2 and report["entries"] > 30
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert main(["export", live, "--format", "jsonl"]) == 0
    assert load_lines(capsys.readouterr().out)[0]["type"] == "session"


def load_lines(text: str) -> list[dict]:
    return [orjson.loads(line) for line in text.splitlines() if line]


def test_cli_export_errors_are_one_line(tmp_path):
    bad = tmp_path / "not-a-session.jsonl"
    bad.write_bytes(b"")
    env = {**os.environ, "HOME": str(tmp_path)}
    for args in ([str(tmp_path / "missing.jsonl")], [str(bad)]):
        proc = subprocess.run([sys.executable, "-m", "journal.cli", "export", *args],
                              capture_output=True, text=True, env=env, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "Traceback" not in proc.stderr


def test_generated_session_and_pi_fixture(tmp_path, pi_fixture):
    path = tmp_path / "gen.jsonl"
    gen_session_module().generate(path, target_bytes=2_000_000, seed=3, branch_every=3,
                                  compaction_every_bytes=600_000)
    md = export(path, "md")
    live = [e for e in load(path).entries if e["type"] == "message"]
    assert md.count("## Turn") >= 5 and "### Compaction" in md
    assert live[-1]["id"] in md
    page = export(path, "html")
    assert "<img" not in page.split('id="jsonl">', 1)[1].split("</script>")[0]
    fixture = pi_fixture("all-types.jsonl")
    text = export(fixture, "md", all_branches=True)
    for entry in load(fixture).entries:
        assert entry["id"] in text


# the page in a real browser


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (Debian package 'chromium'; .ci/run installs "
                    "it when missing): the page cannot be checked in a real browser")
    return found


def run_chromium(browser: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--disable-background-networking",
         f"--user-data-dir={home / 'profile'}",
         # every host name fails to resolve: a page that needed the network would not render
         "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=10000", *args],
        capture_output=True, text=True, env=env, timeout=120)


class _Dom(HTMLParser):
    """Which elements the rendered page holds: their tag, attributes and text inside."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[dict] = []
        self.elements: list[dict] = []

    def handle_starttag(self, tag, attrs):
        node = {"tag": tag, "attrs": dict(attrs), "text": [], "parents": list(self.stack)}
        self.elements.append(node)
        if tag not in ("br", "input", "meta", "link", "img", "hr"):
            self.stack.append(node)

    def handle_endtag(self, tag):
        for n in range(len(self.stack) - 1, -1, -1):
            if self.stack[n]["tag"] == tag:
                del self.stack[n:]
                break

    def handle_data(self, data):
        for node in self.stack:
            node["text"].append(data)

    def find(self, tag: str, **attrs: str) -> list[dict]:
        return [e for e in self.elements if e["tag"] == tag and all(
            (e["attrs"].get(k.rstrip("_")) or "").split().count(v) if k == "class_"
            else e["attrs"].get(k) == v for k, v in attrs.items())]


def text(node: dict) -> str:
    return "".join(node["text"])


def test_html_page_renders_in_chromium(lineage_pair, tmp_path):
    browser = chromium()
    _, live = lineage_pair
    page = tmp_path / "session.html"
    page.write_text(export(live, "html"))
    proc = run_chromium(browser, tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    body = dom.find("body")[0]
    assert body["attrs"].get("data-ready") == "1", "the page's script did not finish"
    # the tree: segments, the side branch, labels, the live leaf marked
    nodes = dom.find("div", class_="node")
    assert len(nodes) >= 3
    assert any("side answer" in text(n) for n in nodes)
    assert sum("live leaf" in text(n) for n in nodes) == 1
    assert any("very first" in text(n) for n in nodes)
    # the live branch's messages, not the side branch's
    main_el = dom.find("main", id="messages")[0]
    shown = text(main_el)
    for wanted in ("the very end", "after everything", "summary 1", "before rotation"):
        assert wanted in shown
    assert "side answer" not in shown
    # a compaction, collapsed, saying what it replaced and the tokens before
    compactions = dom.find("details", class_="compaction")
    assert compactions and all("open" not in c["attrs"] for c in compactions)
    assert any("2,000 tokens before" in text(c) and "replaced" in text(c) for c in compactions)
    # a tool call paired with its result, in one element
    pairs = {p["attrs"]["data-call"]: p for p in dom.find("div", class_="tool-pair")}
    assert "result before" in text(pairs["call-before"])
    assert "cat notes.txt" in text(pairs["call-before"])
    # long output and thinking collapsed; synthetic result and repair marker marked
    assert any("line 199 of the long output" in text(d) and "open" not in d["attrs"]
               for d in dom.find("details", class_="long"))
    assert dom.find("details", class_="thinking")
    assert "synthetic result" in text(pairs["call-lost"])
    assert dom.find("span", class_="repair")
    # the hostile text is text, not markup
    assert not dom.find("img")
    assert HOSTILE in shown
    # header: models, tokens, cost, lineage
    head = text(dom.find("header", id="head")[0])
    assert "claude-opus-4-1" in head and "$0.5000" in head and ".jsonl.gz (archive)" in head
    # no request could leave the page: nothing in it names a source or target outside it
    for element in dom.elements:
        for name in ("src", "href", "action", "data"):
            value = element["attrs"].get(name)
            assert value is None or value.startswith("#"), (element["tag"], name, value)
    shot = tmp_path / "session.png"
    proc = run_chromium(browser, tmp_path, f"--screenshot={shot}", "--window-size=1280,900",
                        page.as_uri())
    assert proc.returncode == 0 and shot.stat().st_size > 10_000, proc.stderr[-2000:]
    print(f"screenshot: {shot}")


def test_deep_link_opens_the_entry_on_its_branch(lineage_pair, tmp_path):
    browser = chromium()
    _, live = lineage_pair
    every = export(live, "jsonl", all_branches=True)
    side_id = next(e["id"] for e in load_lines(every)
                   if e.get("type") == "message" and "side answer" in orjson.dumps(e).decode())
    page = tmp_path / "session.html"
    page.write_text(export(live, "html"))
    proc = run_chromium(browser, tmp_path, "--dump-dom", page.as_uri() + "#" + side_id)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    target = [e for e in dom.elements if e["attrs"].get("id") == side_id]
    assert target and "target" in (target[0]["attrs"].get("class") or "")
    assert "side answer" in text(dom.find("main", id="messages")[0])


def test_gz_archive_alone_exports(lineage_pair):
    archive, live = lineage_pair
    with gzip.open(archive) as f:
        assert f.read(10)
    md = export(archive, "md")  # a path inside the lineage leads to the whole of it
    assert "the very end" in md


def test_temps_of_killed_exports_are_removed_by_the_next_export_there(tmp_path: Path) -> None:
    """`export -o` SIGKILLed while it writes leaves its temp (no cleanup can run); the next
    export into that folder removes it, and never the temp of an export still running."""
    import signal

    from paused_cli import start

    with Session.create(str(tmp_path), cwd="/w") as session:
        session.append_message({"role": "user", "content": "hello", "timestamp": 1})
        path = session.path
    out = tmp_path / "out"
    out.mkdir()
    killed, left = start(["export", path, "--format", "jsonl", "-o", str(out / "a.jsonl")])
    killed.kill()
    killed.wait()
    assert os.listdir(out) == [Path(left).name]
    running, held = start(["export", path, "--format", "md", "-o", str(out / "b.md")])
    try:
        assert os.listdir(out) == [Path(held).name]  # the killed one's temp is gone
        assert main(["export", path, "--format", "html", "-o", str(out / "c.html")]) == 0
        assert sorted(os.listdir(out)) == sorted(["c.html", Path(held).name])
        running.send_signal(signal.SIGTERM)
        assert running.wait(20) == 128 + signal.SIGTERM
    finally:
        running.kill()
        running.wait()
    assert os.listdir(out) == ["c.html"]
