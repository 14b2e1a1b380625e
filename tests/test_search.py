"""`journal search` and `journal.search`: what is searched, lineages and archives, filters,
escaped text, damaged files, the byte prefilter, and the command line."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from corruption import generated_bytes, invalid_utf8_in_text
from test_rotate import assistant, build_session, user
from third_party import pi_path

from journal import Session, codec, load, search
from journal.cli.commands import main
from journal.rotation import rotate

SIZE = 1_500_000  # every kind of entry


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    folder = tmp_path / "sessions"
    folder.mkdir()
    path = folder / "gen.jsonl"
    path.write_bytes(generated_bytes(tmp_path, 3, SIZE))
    return path


def entries_of(path: Path) -> list[dict]:
    return [e for e in load(path).entries]


def ids(result) -> list[str]:
    return [h.entry_id for h in result.hits]


def pick(entries: list[dict], predicate) -> dict:
    return next(e for e in entries if predicate(e))


def role(entry: dict) -> str | None:
    message = entry.get("message")
    return message.get("role") if isinstance(message, dict) else None


def block(entry: dict, kind: str) -> dict | None:
    content = entry["message"].get("content")
    if not isinstance(content, list):
        return None
    return next((b for b in content if isinstance(b, dict) and b.get("type") == kind), None)


# what is searched


def test_every_kind_of_text_is_found_where_it_was_written(generated):
    entries = entries_of(generated)
    cases = {
        "user": (pick(entries, lambda e: role(e) == "user"), lambda e: block(e, "text")["text"]),
        "assistant text": (pick(entries, lambda e: role(e) == "assistant" and block(e, "text")),
                           lambda e: block(e, "text")["text"]),
        "thinking": (pick(entries, lambda e: role(e) == "assistant" and block(e, "thinking")),
                     lambda e: block(e, "thinking")["thinking"]),
        "tool result": (pick(entries, lambda e: role(e) == "toolResult"),
                        lambda e: e["message"]["content"][0]["text"]),
        "compaction": (pick(entries, lambda e: e["type"] == "compaction"),
                       lambda e: e["summary"]),
        "branch summary": (pick(entries, lambda e: e["type"] == "branch_summary"),
                           lambda e: e["summary"]),
        "custom message": (pick(entries, lambda e: e["type"] == "custom_message"),
                           lambda e: e["content"]),
        "bash execution": (pick(entries, lambda e: role(e) == "bashExecution"),
                           lambda e: e["message"]["output"]),
        "session name": (pick(entries, lambda e: e["type"] == "session_info"),
                         lambda e: e["name"]),
    }
    for name, (entry, text_of) in cases.items():
        text = text_of(entry)
        needle = text[len(text) // 3: len(text) // 3 + 40].strip() if len(text) > 60 else text
        result = search(needle, [generated.parent], ignore_case=False)
        assert entry["id"] in ids(result), name
        hit = next(h for h in result.hits if h.entry_id == entry["id"])
        assert hit.timestamp == entry["timestamp"]
        assert hit.session == str(generated) and hit.file == str(generated)
        start, end = hit.spans[0]
        assert hit.snippet[start:end] == re.sub(r"\s", " ", needle)


def test_tool_calls_are_found_by_name_and_arguments(generated):
    entries = entries_of(generated)
    entry = pick(entries, lambda e: role(e) == "assistant" and block(e, "toolCall")
                 and isinstance(block(e, "toolCall")["arguments"], dict)
                 and isinstance(block(e, "toolCall")["arguments"].get("path"), str))
    call = block(entry, "toolCall")
    result = search(call["arguments"]["path"], [generated], tool=[call["name"]])
    assert entry["id"] in ids(result)
    hit = next(h for h in result.hits if h.entry_id == entry["id"])
    assert (hit.role, hit.tool, hit.field) == ("assistant", call["name"], "toolCall")
    # every hit is a call of that tool or one of its results
    assert {h.tool for h in result.hits} == {call["name"]}
    assert {h.field for h in result.hits} <= {"toolCall", "toolResult"}


def test_hits_are_exactly_the_entries_whose_text_holds_the_word(generated):
    """Compared with a reading of every entry: the prefilter loses nothing, adds nothing."""
    word = "projection"
    result = search(word, [generated])
    found = ids(result)
    assert len(found) == len(set(found))
    expected = set()
    for e in entries_of(generated):
        texts: list[str] = []
        if e["type"] == "message":
            m = e["message"]
            content = m.get("content")
            if isinstance(content, str):
                texts.append(content)
            for b in content if isinstance(content, list) else []:
                texts.extend(str(b.get(k, "")) for k in ("text", "thinking"))
                if b.get("type") == "toolCall":
                    texts.append(b["name"] + json.dumps(b["arguments"]))
            texts.extend(str(m.get(k, "")) for k in ("command", "output"))
        elif e["type"] in ("compaction", "branch_summary"):
            texts.append(e["summary"])
        elif e["type"] == "custom_message":
            texts.append(str(e["content"]))
        elif e["type"] == "session_info":
            texts.append(e.get("name") or "")
        elif e["type"] == "label":
            texts.append(e.get("label") or "")
        if any(word in t.lower() for t in texts):
            expected.add(e["id"])
    assert len(expected) > 20
    assert set(found) == expected


def test_only_lines_holding_the_needle_are_parsed(generated, monkeypatch):
    parsed: list[bytes] = []
    real = codec.parse_line

    def counting(line):
        parsed.append(line.raw)
        return real(line)

    monkeypatch.setattr(codec, "parse_line", counting)
    data = generated.read_bytes()
    target = pick(entries_of(generated), lambda e: e["type"] == "compaction")
    needle = re.search(r"[A-Za-z ]{24}", target["summary"]).group()
    lines = data.split(b"\n")
    holding = sum(needle.lower().encode() in line.lower() for line in lines)
    parsed.clear()
    result = search(needle, [generated], ignore_case=True)
    assert target["id"] in ids(result)
    entries = [raw for raw in parsed if not raw.startswith(b'{"type":"session"')]
    assert len(entries) == holding
    assert holding < len(lines) / 4


def test_escaped_and_non_ascii_text_is_found_whatever_the_writer(tmp_path):
    text = 'she said "hi"\nthen ran C:\\tools\\x.exe for the café – naïve 😀 done'
    header = {"type": "session", "version": 3, "id": "s-1", "timestamp": "2026-01-15T09:00:00Z",
              "cwd": "/p"}
    entry = {"type": "message", "id": "a1b2c3d4", "parentId": None,
             "timestamp": "2026-01-15T09:00:01.000Z",
             "message": {"role": "user", "content": text, "timestamp": 1}}
    plain = tmp_path / "utf8.jsonl"
    plain.write_bytes(orjson.dumps(header) + b"\n" + orjson.dumps(entry) + b"\n")
    escaped = tmp_path / "ascii.jsonl"  # every non-ASCII character as a \u escape
    escaped.write_text(json.dumps(header) + "\n" + json.dumps(entry, ensure_ascii=True) + "\n")
    assert b"caf\\u00e9" in escaped.read_bytes()
    for query in ('"hi"', 'said "hi"\nthen', "C:\\tools\\x.exe", "café", "naïve 😀", "CAFÉ"):
        result = search(query, [tmp_path], ignore_case=True)
        assert sorted(h.file for h in result.hits) == [str(escaped), str(plain)], query
    hit = search("😀", [plain]).hits[0]
    start, end = hit.spans[0]
    assert hit.snippet[start:end] == "😀"
    assert "\n" not in hit.snippet


# lineages and archives


def rotated_twice(folder: Path) -> tuple[str, list[str]]:
    s, _ = build_session(folder)
    first = s.path
    s.close()
    r1 = rotate(first)
    with Session.open(r1.successor) as s2:
        for i in range(8):
            s2.append_message(user(f"second file {i} " + "w" * 3000))
        s2.append_compaction("third summary", s2.entries[-2]["id"], 9999)
        s2.append_message(user("needle in the live file"))
        s2.append_message(assistant("answered in the live file"))
    r2 = rotate(r1.successor)
    assert r1.archive.endswith(".gz") and r2.archive.endswith(".gz")
    with Session.open(r2.successor) as s3:
        s3.append_message(user("written after the last rotation"))
    return r2.successor, [r1.archive, r2.archive, r2.successor]


def unpacked(path: str) -> bytes:
    data = Path(path).read_bytes()
    return gzip.decompress(data) if path.endswith(".gz") else data


def test_a_rotated_session_is_one_session_and_repeated_entries_show_once(tmp_path):
    live, chain = rotated_twice(tmp_path)
    # each rotation's successor repeats the kept entries of the file before it
    for text, files in (("after everything", chain[:2]), ("second file 7", chain[1:])):
        assert [text.encode() in unpacked(f) for f in chain] == [f in files for f in chain]
        result = search(text, [tmp_path])
        assert [(h.session, h.file) for h in result.hits] == [(live, files[0])], text
        assert result.sessions == 1 and result.files == 3
        # the same from any file of the lineage, archives included
        for path in chain:
            assert [h.file for h in search(text, [path]).hits] == [files[0]]
    # text only the first archive holds is found there, named by the live file
    assert [(h.session, h.file) for h in search("r0 q0", [tmp_path]).hits] == [(live, chain[0])]
    assert [h.file for h in search("after the last rotation", [tmp_path]).hits] == [live]


def test_summaries_and_names_are_found_in_archives(tmp_path):
    live, chain = rotated_twice(tmp_path)
    summary = search("summary 0", [tmp_path], role=["summary"])
    assert [h.role for h in summary.hits] == ["compaction"]
    assert summary.hits[0].file == chain[0]
    side = search("side path", [tmp_path])
    assert [h.role for h in side.hits] == ["branch_summary"]
    named = search("rotation test", [tmp_path]).hits
    assert named and {h.role for h in named} == {"session_info"}
    assert named[0].file == chain[0]


# filters


def test_role_time_case_regex_and_limit(tmp_path):
    s = Session.create(tmp_path, cwd="/p")
    s.append_message(user("Deploy the Parser today"))
    s.append_message(assistant("the parser is deployed"))
    s.close()
    both = search("parser", [tmp_path])
    assert [h.role for h in both.hits] == ["user", "assistant"]
    assert [h.role for h in search("Parser", [tmp_path]).hits] == ["user"]  # smart case
    assert len(search("Parser", [tmp_path], ignore_case=True).hits) == 2
    assert search("parser", [tmp_path], ignore_case=False).hits[0].role == "assistant"
    assert [h.role for h in search("parser", [tmp_path], role=["assistant"]).hits] == \
        ["assistant"]
    assert [h.snippet for h in search(r"depl\w+ the", [tmp_path], regex=True).hits] == \
        ["Deploy the Parser today"]
    assert search("deploy(ed)? the", [tmp_path], regex=True).hits[0].spans == ((0, 10),)
    assert len(search("parser", [tmp_path], limit=1).hits) == 1
    assert search("parser", [tmp_path], limit=1).truncated
    stamp = both.hits[0].timestamp
    day = stamp[:10]
    assert len(search("parser", [tmp_path], since=day, until=day).hits) == 2
    assert search("parser", [tmp_path], until="2000-01-01").hits == []
    assert search("parser", [tmp_path], since="2999-01-01").hits == []
    with pytest.raises(journal_error()):
        search("parser", [tmp_path], role=["robot"])
    with pytest.raises(journal_error()):
        search("(", [tmp_path], regex=True)
    with pytest.raises(journal_error()):
        search("x", [tmp_path], since="yesterday")
    with pytest.raises(journal_error()):
        search("x", [tmp_path / "nowhere"])


def journal_error():
    from journal import JournalError

    return JournalError


# damage


def test_damaged_files_are_reported_and_the_others_searched(tmp_path, generated):
    folder = generated.parent
    data = generated.read_bytes()
    lines = data.split(b"\n")
    target = pick(entries_of(generated), lambda e: role(e) == "toolResult")
    word = target["message"]["content"][0]["text"][:25]
    (folder / "garbage.jsonl").write_bytes(b"not json at all " + word.encode() + b"\n")
    (folder / "archive").mkdir()
    (folder / "archive" / "old.jsonl.gz").write_bytes(b"\x1f\x8bnot really gzip")
    at = next(i for i, line in enumerate(lines) if f'"id":"{target["id"]}"'.encode() in line)
    (folder / "bad-line.jsonl").write_bytes(invalid_utf8_in_text(data, at))
    (folder / "torn.jsonl").write_bytes(data + b'{"type":"message","id":"99999999",' +
                                        word.encode())
    os.mkfifo(folder / "fifo.jsonl")
    result = search(word, [folder])
    files = {h.file for h in result.hits}
    assert str(generated) in files and str(folder / "torn.jsonl") in files
    problems = {Path(p.path).name: p.message for p in result.problems}
    assert set(problems) >= {"garbage.jsonl", "old.jsonl.gz", "bad-line.jsonl", "torn.jsonl",
                             "fifo.jsonl"}
    assert "torn" in problems["torn.jsonl"]
    assert "gzip" in problems["old.jsonl.gz"].lower()


def test_an_older_version_file_is_searched_as_the_store_loads_it(tmp_path):
    header = {"type": "session", "version": 1, "id": "old-1", "timestamp": "2025-01-01T00:00:00Z",
              "cwd": "/p"}
    entry = {"type": "message", "timestamp": "2025-01-01T00:00:01.000Z",
             "message": {"role": "hookMessage", "content": "legacy words here", "timestamp": 1}}
    path = tmp_path / "v1.jsonl"
    path.write_bytes(orjson.dumps(header) + b"\n" + orjson.dumps(entry) + b"\n")
    hits = search("legacy words", [tmp_path]).hits
    assert [(h.entry_id, h.role) for h in hits] == [(load(path).entries[0]["id"], "custom")]


def test_pi_fixture(tmp_path):
    path = pi_path("all-types.jsonl")
    hits = search("export const a", [path]).hits
    assert [(h.role, h.tool) for h in hits][:1] == [("toolResult", "read")]
    assert all(h.session == os.path.realpath(path) for h in hits)


# the command line


def test_cli_json_and_text(tmp_path, capsys):
    live, chain = rotated_twice(tmp_path)
    assert main(["search", "after everything", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(h["session"], h["file"], h["role"]) for h in out["hits"]] == \
        [(live, chain[0], "user")]
    assert main(["search", "needle in the", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    session, entry_id, stamp, who, snippet = out.splitlines()[0].split("\t")
    assert (session, who, snippet) == (live, "user", "needle in the live file")
    assert "1 hit(s) in 1 session(s), 3 file(s)" in err
    assert main(["search", "no such words anywhere", str(tmp_path)]) == 1


def run_cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "journal.cli", "search", *argv],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)


def test_cli_errors_are_one_line(tmp_path):
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "bad.jsonl").write_bytes(b"\x00\x00 hello\n")
    for argv, message in [(("(", "--regex"), "not a regular expression"),
                          (("x", str(tmp_path / "nowhere")), "no such file"),
                          (("x", "--since", "soon"), "not a date")]:
        proc = run_cli(tmp_path, *argv)
        assert proc.returncode == 2, argv
        assert proc.stderr.startswith("Error: ") and message in proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    proc = run_cli(tmp_path, "hello")  # the default folder, ./sessions
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "Warning: " in proc.stderr and "bad.jsonl" in proc.stderr


def test_the_exit_status_is_greps_whatever_the_warnings(tmp_path):
    """0 found, 1 none found, 2 an error; an unreadable file is a warning and changes none of
    them, with --json too."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    s = Session.create(folder, cwd="/w")
    s.append_message({"role": "user", "content": "a findable phrase", "timestamp": 1})
    s.close()
    (folder / "archive").mkdir()
    (folder / "archive" / "old.jsonl.gz").write_bytes(b"\x1f\x8bnot really gzip")
    for query, status in (("findable phrase", 0), ("nowhere to be seen", 1)):
        for json_flag in ((), ("--json",)):
            proc = run_cli(tmp_path, query, str(folder), *json_flag)
            assert proc.returncode == status, (query, json_flag, proc.stderr)
            assert "Traceback" not in proc.stderr
            if json_flag:
                out = json.loads(proc.stdout)
                assert len(out["hits"]) == 1 - status
                assert [p["path"] for p in out["problems"]] == [
                    os.path.realpath(folder / "archive" / "old.jsonl.gz")]
            else:
                assert "old.jsonl.gz" in proc.stderr
    proc = run_cli(tmp_path, "x", "--since", "soon", str(folder), "--json")
    assert proc.returncode == 2 and proc.stdout == ""
