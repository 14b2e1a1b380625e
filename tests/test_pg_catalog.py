"""`journal search`, `usage` and `export` on PostgreSQL sessions: a folder of generated
sessions (one of them a rotated lineage with a `.gz` archive) pushed into a database gives
the same hits, the same tokens and costs and the same exports as the files, each entry of a
lineage once."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
from corruption import gen_session_module  # noqa: E402
from pg_server import fresh_database  # noqa: E402

from journal import Session, export, load, prune, search, usage  # noqa: E402
from journal.accounting import UsageReport  # noqa: E402
from journal.errors import JournalError, NotASession  # noqa: E402
from journal.pg.lineages import database_lineages  # noqa: E402
from journal.pg.transfer import pull, push  # noqa: E402
from journal.pg.url import parse_url, session_url  # noqa: E402
from journal.textsearch import SearchResult  # noqa: E402

QUERIES = [("lock", {}), ("Tree", {}), ("summary", {"role": ["summary"]}),
           (r"handler\s+\w+", {"regex": True}), ("node", {"role": ["assistant"]})]


def turn(session: Session, tag: str) -> None:
    """A few turns with recorded usage, then a compaction keeping the last two."""
    ids = []
    for i in range(4):
        ids.append(session.append_message({"role": "user", "content": [
            {"type": "text", "text": f"{tag} question {i} " + "q" * 2000}], "timestamp": 1}))
        session.append_message({
            "role": "assistant", "content": [{"type": "text", "text": f"{tag} answer {i}"}],
            "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": "stop",
            "usage": {"input": 1000 + i, "output": 50, "cacheRead": 300, "cacheWrite": 20,
                      "totalTokens": 1370 + i}, "timestamp": 2})
    session.append_compaction(f"summary of {tag}", ids[-2], 9000)


def sessions_folder(folder: Path) -> dict[str, str]:
    """Three generated sessions, the first rotated twice (one archive compressed, one not):
    {session id of each lineage's live file: that file}."""
    folder.mkdir()
    gen = gen_session_module()
    lives = []
    for seed in (1, 2, 3):
        path = folder / f"gen-{seed}.jsonl"
        gen.generate(path, target_bytes=60_000, seed=seed, branch_every=3,
                     compaction_every_bytes=15_000)
        lives.append(str(path))
    with Session.open(lives[0]) as session:
        for compress in (True, False):
            turn(session, f"rotation lock {compress}")
            assert session.rotate(compress=compress).rotated
        turn(session, "after the rotations")
        lives[0] = session.path
    archived = sorted(os.listdir(folder / "archive"))
    assert len(archived) == 2 and sum(name.endswith(".gz") for name in archived) == 1
    out = {}
    for live in lives:
        header = load(live).header
        assert header is not None
        out[str(header["id"])] = live
    return out


@pytest.fixture
def pushed(pg_url: str, tmp_path: Path) -> tuple[str, dict[str, str]]:
    lives = sessions_folder(tmp_path / "src")
    result = push(str(tmp_path / "src"), pg_url)
    assert len(result.pushed) == 5  # three lineages, five files
    return pg_url, lives


def file_key(path: str) -> str:
    header = load(path).header
    assert header is not None
    return str(header["id"])


def db_key(url: str) -> str:
    return parse_url(url).session


def hits(result: SearchResult, key: Any) -> list[tuple[Any, ...]]:
    return [(key(h.session), key(h.file), h.offset, h.entry_id, h.timestamp, h.role, h.tool,
             h.field, h.snippet, h.spans, h.matches) for h in result.hits]


def test_search_finds_in_the_database_what_it_finds_in_the_files(pushed, tmp_path):
    url, lives = pushed
    folder = str(tmp_path / "src")
    for query, options in QUERIES:
        on_files = search(query, [folder], **options)
        on_db = search(query, [url], **options)
        assert on_files.hits, query  # the comparison compares something
        assert on_db.sessions == on_files.sessions == 3
        assert on_db.files == on_files.files == 5
        assert not on_db.problems
        # the same entries, each once; hits are in session order, which is named otherwise
        assert sorted(hits(on_db, db_key)) == sorted(hits(on_files, file_key)), query
        assert len({(h.session, h.entry_id) for h in on_db.hits}) == len(on_db.hits)


def test_a_session_url_searches_its_whole_lineage(pushed, tmp_path):
    url, lives = pushed
    rotated = file_key(rotated_live(lives))
    archived = list((tmp_path / "src" / "archive").iterdir())
    assert len(archived) == 2
    first = file_key(str(next(p for p in archived if p.name.endswith(".gz"))))
    on_files = search("lock", [rotated_live(lives)])
    for named in (session_url(url, rotated), session_url(url, first)):
        on_db = search("lock", [named])
        assert on_db.sessions == 1 and on_db.files == 3
        assert hits(on_db, db_key) == hits(on_files, file_key)
        assert any(db_key(h.file) != rotated for h in on_db.hits)  # archives searched too


def rotated_live(lives: dict[str, str]) -> str:
    """The live file of the rotated lineage (its name is not gen-2 or gen-3)."""
    return next(p for p in lives.values()
                if not os.path.basename(p).startswith(("gen-2", "gen-3")))


def totals(report: UsageReport, key: Any) -> dict[str, tuple[Any, ...]]:
    return {key(s.path): (len(s.files), s.total.messages, s.total.input, s.total.output,
                          s.total.cache_read, s.total.cache_write, round(s.total.cost, 9))
            for s in report.sessions}


def test_usage_counts_the_database_as_the_files_each_entry_once(pushed, tmp_path):
    url, lives = pushed
    on_files = usage([str(tmp_path / "src")])
    on_db = usage([url])
    assert not on_db.warnings
    by_file = totals(on_files, file_key)
    assert len(by_file) == 3 and all(t[1] > 0 for t in by_file.values())
    assert totals(on_db, db_key) == by_file
    for by in ("model", "day"):
        assert on_db.to_json(by)["rows"] == on_files.to_json(by)["rows"]
    assert on_db.total.cost == pytest.approx(on_files.total.cost)
    # one session URL: that session's lineage alone
    rotated = file_key(rotated_live(lives))
    alone = usage([session_url(url, rotated)])
    assert totals(alone, db_key) == {rotated: by_file[rotated]}


def normalized(text: str) -> str:
    """An export without what names its files or its moment."""
    text = re.sub(r'"lineage":\[[^\]]*\]', '"lineage":[]', text)
    text = re.sub(r'"exported":"[^"]*"', '"exported":""', text)
    return "\n".join(line for line in text.split("\n")
                     if not line.startswith(("files: ", "exported: ")))


@pytest.mark.parametrize("fmt", ["md", "html", "jsonl"])
def test_export_of_a_database_session_is_the_files_export(pushed, fmt):
    url, lives = pushed
    for session, live in lives.items():
        on_file = export(live, fmt, all_branches=fmt != "html")
        on_db = export(session_url(url, session), fmt, all_branches=fmt != "html")
        assert len(on_file) > 10_000
        if fmt == "jsonl":
            assert on_db == on_file  # byte for byte
        else:
            assert normalized(on_db) == normalized(on_file)
            assert session_url(url, session) in on_db  # its lineage is named by URL


def test_export_of_a_database_names_one_lineage(pushed):
    url, lives = pushed
    with pytest.raises(JournalError, match="holds 3 lineages of sessions"):
        export(url, "md")
    with pytest.raises(NotASession):
        export(session_url(url, "no-such-session"), "md")
    # a database of one lineage exports it
    live = rotated_live(lives)
    other = fresh_database()
    push(live, other)
    assert export(other, "jsonl") == export(live, "jsonl")


def run_cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=120)


def test_the_commands_take_database_urls(pushed, tmp_path):
    url, lives = pushed
    folder = str(tmp_path / "src")
    found = run_cli(tmp_path, "search", "lock", url, "--json")
    assert found.returncode == 0, found.stderr
    on_files = run_cli(tmp_path, "search", "lock", folder, "--json")
    assert len(json.loads(found.stdout)["hits"]) == len(json.loads(on_files.stdout)["hits"]) > 0
    counted = run_cli(tmp_path, "usage", url, "--json", "--by", "model")
    assert counted.returncode == 0, counted.stderr
    assert json.loads(counted.stdout)["rows"] == json.loads(
        run_cli(tmp_path, "usage", folder, "--json", "--by", "model").stdout)["rows"]
    table = run_cli(tmp_path, "usage", url)  # the table names each session by its URL
    assert table.returncode == 0, table.stderr
    assert all(session_url(url, s) in table.stdout.replace("\n", "") or s[:20] in table.stdout
               for s in lives)
    assert "postgresql:/" + url.split("//", 1)[1] not in table.stdout  # not made a path
    lines = run_cli(tmp_path, "search", "lock", url).stdout.splitlines()
    assert lines and all(line.startswith(url + "?session=") for line in lines)
    session, live = next(iter(lives.items()))
    out = tmp_path / "out.md"
    made = run_cli(tmp_path, "export", session_url(url, session), "--format", "md", "-o",
                   str(out))
    assert made.returncode == 0, made.stderr
    assert normalized(out.read_text()) == normalized(export(live, "md"))
    refused = run_cli(tmp_path, "export", url, "-o", str(tmp_path / "all.md"))
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1].startswith("Error: ")
    assert "holds 3 lineages of sessions" in refused.stderr and not (tmp_path / "all.md").exists()
    shutil.rmtree(tmp_path / "src")  # the database alone answers
    assert run_cli(tmp_path, "search", "lock", url, "--json").returncode == 0


def test_a_lineage_rotated_in_the_database_reads_as_its_pulled_files(pg_url, tmp_path):
    """A session written and rotated twice in the database (not pushed): search, usage and
    export of its URL equal those of the files `journal pull` writes for it (sessions named
    by their headers' ids: the first one's URL names it otherwise)."""
    with Session.create(session_url(pg_url, "db-rotated"), cwd="/w") as session:
        for round_ in range(2):
            turn(session, f"database lock {round_}")
            assert session.rotate().rotated
        turn(session, "database after")
        live = session.path
    with Session.create(session_url(pg_url, "db-other"), cwd="/w") as other:
        turn(other, "another lock")
    chains = database_lineages(pg_url)
    assert sorted(len(c) for c in chains) == [1, 3]
    assert database_lineages(live) == [c for c in chains if len(c) == 3]
    pull(live, tmp_path / "pulled")
    folder = str(tmp_path / "pulled")
    on_db = search("lock", [live])
    on_files = search("lock", [folder])
    assert on_files.files == on_db.files == 3 and on_db.hits
    assert hits(on_db, file_key) == hits(on_files, file_key)
    assert totals(usage([live]), file_key) == totals(usage([folder]), file_key)
    (pulled_live,) = [s.path for s in usage([folder]).sessions]
    assert export(live, "jsonl", all_branches=True) == export(pulled_live, "jsonl",
                                                              all_branches=True)


def test_results_name_database_sessions_without_the_password(pushed):
    url, lives = pushed
    secret = url.replace("postgres@", "postgres:sekrit-pw@", 1)  # trust: any password does
    assert secret != url
    session = next(iter(lives))
    found = search("lock", [secret])
    counted = usage([secret])
    page = export(session_url(secret, session), "html")
    text = export(session_url(secret, session), "md")
    assert found.hits and counted.sessions
    assert {db_key(h.session) for h in found.hits} == set(lives)
    assert all(h.session.startswith("postgresql://postgres:***@") for h in found.hits)
    for shown in (json.dumps(found.to_json()), json.dumps(counted.to_json()), page, text):
        assert "sekrit-pw" not in shown
    with pytest.raises(JournalError) as refused:
        export(secret, "md")
    assert "sekrit-pw" not in str(refused.value)


def test_prune_refuses_a_database_and_leaves_nothing(pushed, tmp_path, monkeypatch):
    url, lives = pushed
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(tmp_path))
    refused = run_cli(tmp_path, "prune", url, "--older-than", "1s")
    assert refused.returncode == 2
    assert "journal prune works on session files only" in refused.stderr
    assert sorted(os.listdir(tmp_path)) == before
    with pytest.raises(JournalError, match="journal ls URL"):  # the library says it too
        prune([url], timedelta(seconds=1))
    assert len(database_lineages(url)) == 3  # nothing removed


def test_ls_of_a_database_has_each_lineages_tokens_and_cost(pushed, tmp_path):
    """`journal ls URL` counts tokens and cost as `journal usage` does, each lineage once,
    as `journal ls DIR` does for the same sessions as files."""
    url, lives = pushed
    listed = run_cli(tmp_path, "ls", url, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["session"]: row for row in json.loads(listed.stdout)}
    on_files = usage([str(tmp_path / "src")])
    expected = {file_key(s.path): s for s in on_files.sessions}
    assert set(rows) == set(expected) == set(lives)
    for session, counted in expected.items():
        assert rows[session]["tokens"] == counted.total.total_tokens > 0
        assert rows[session]["cost"] == pytest.approx(counted.total.cost)
    table = run_cli(tmp_path, "ls", url)
    assert table.returncode == 0, table.stderr
    header = table.stdout.splitlines()[0].split("\t")
    assert "tokens" in header and "cost" in header
    for session, counted in expected.items():  # a session URL: that lineage's row only
        one = run_cli(tmp_path, "ls", session_url(url, session), "--json")
        assert one.returncode == 0, one.stderr
        [row] = json.loads(one.stdout)
        assert row["session"] == session and row["tokens"] == counted.total.total_tokens


def test_warnings_about_a_damaged_database_session_name_it_without_the_password(pg_url):
    from journal import export_session
    from journal.storage import as_storage

    secret_db = pg_url.replace("postgres@", "postgres:sekrit-pw@", 1)
    assert secret_db != pg_url
    url = session_url(secret_db, "damaged-export")
    as_storage(url).create(b'{"type":"session","version":3,"id":"damaged-export",'
                           b'"timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}\n'
                           b'{"type":"message","id":"aaaa0001","parentId":null,"timestamp":'
                           b'"2026-01-01T00:00:00.000Z","message":{"role":"user","content":'
                           b'"hi","timestamp":1}}\n'
                           b'{"type":"message","id":"broken\n')
    result = export_session(url, "md")
    assert result.entries == 1 and result.warnings
    assert all("sekrit-pw" not in w and "postgres:***@" in w for w in result.warnings)
    assert "sekrit-pw" not in result.text
    counted = usage([url])
    assert counted.warnings and "journal repair postgresql://postgres:***@" in \
        counted.warnings[0].message
    assert "sekrit-pw" not in json.dumps(counted.to_json())


# the fields of a folder's row (`journal ls DIR --json`); a database's row has them all, with
# the same meaning, and what only a database says besides (session, url, file, sessions,
# created, updated, holder)
FILE_ROW = ("path", "files", "id", "name", "cwd", "models", "first", "last", "entries", "size",
            "state", "holderPid", "problems", "tokens", "cost", "dialect", "usage")


def ls_rows(tmp_path: Path, target: str) -> dict[str, dict[str, Any]]:
    """`journal ls TARGET --json` by session id (a lineage's live header id: the id its live
    session is pushed under)."""
    listed = run_cli(tmp_path, "ls", target, "--json", "--no-cache")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ""
    return {row["id"]: row for row in json.loads(listed.stdout)}


def normalised(row: dict[str, Any]) -> dict[str, Any]:
    """A row's file-row fields with only the names changed: its path and files (a file path
    or a URL) left out, their number kept."""
    assert set(FILE_ROW) <= set(row)
    return {key: len(row[key]) if key == "files" else row[key]
            for key in FILE_ROW if key != "path"}


def table_rows(tmp_path: Path, target: str) -> list[list[str]]:
    """`journal ls TARGET` as text (not a terminal: tab-separated), without its path column."""
    listed = run_cli(tmp_path, "ls", target, "--sort", "first")
    assert listed.returncode == 0, listed.stderr
    return [line.split("\t")[:-1] for line in listed.stdout.splitlines()]


def test_a_database_row_means_what_a_folder_row_means(pg_url, tmp_path):
    """A rotated file lineage pushed: `ls URL` gives, field for field, what `ls DIR` gives
    (entries and size over the whole lineage, models of the live tail, first and last, state,
    tokens and cost), in JSON and as text, but for the names. They once differed: entries and
    size were the live session's only, models the lineage's replies, and first, last, usage
    and state were missing."""
    folder = tmp_path / "lineages"
    folder.mkdir()
    with Session.create(str(folder), cwd="/w") as session:
        session.append_session_info("rotated twice")
        for tag in ("one", "two"):
            turn(session, tag)
            assert session.rotate(compress=False).rotated
        session.append_model_change("openai", "gpt-4o")
        session.append_message({"role": "user", "content": "after", "timestamp": 3})
    with Session.create(str(folder), cwd="/elsewhere") as session:
        turn(session, "alone")
    push(str(folder), pg_url)
    on_files, in_db = ls_rows(tmp_path, str(folder)), ls_rows(tmp_path, pg_url)
    assert set(on_files) == set(in_db) and len(on_files) == 2
    for session_id, row in on_files.items():
        assert normalised(in_db[session_id]) == normalised(row)
        db_row = in_db[session_id]
        assert [db_key(url) for url in db_row["files"]] == [file_key(f) for f in row["files"]]
        assert db_row["path"] == db_row["url"] == db_row["files"][-1]
        assert db_row["sessions"] == len(row["files"]) and db_row["session"] == session_id
        for key in ("created", "updated"):  # times as the store writes them (they were
            # in microseconds): milliseconds and a Z, as `first` and `last`
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", db_row[key]), db_row
    rotated = next(r for r in on_files.values() if len(r["files"]) == 3)
    assert rotated["name"] == "rotated twice"
    assert rotated["models"] == ["claude-sonnet-4-5", "gpt-4o"]  # those of the live tail
    assert rotated["entries"] > 20 and rotated["tokens"] > 0 and rotated["state"] == "live"
    assert table_rows(tmp_path, pg_url) == table_rows(tmp_path, str(folder))


def test_a_pushed_compressed_archive_counts_its_bytes_as_the_database_holds_them(pushed, tmp_path):
    """Generated sessions with branches and compactions, one rotated twice into a compressed
    and a plain archive: every field is a folder's, but the size of the lineage with the
    `.gz` archive, which is its bytes uncompressed (the database holds those; the compressed
    size is the file's, known to no database)."""
    import gzip

    url, lives = pushed
    on_files, in_db = ls_rows(tmp_path, str(tmp_path / "src")), ls_rows(tmp_path, url)
    assert set(on_files) == set(in_db) == set(lives)
    for session_id, row in on_files.items():
        files = [Path(f) for f in row["files"]]
        unpacked = sum(len(gzip.decompress(f.read_bytes())) if f.suffix == ".gz"
                       else f.stat().st_size for f in files)
        assert in_db[session_id]["size"] == unpacked
        assert (unpacked == row["size"]) == (not any(f.suffix == ".gz" for f in files))
        assert {**normalised(in_db[session_id]), "size": None} == {**normalised(row),
                                                                    "size": None}


def test_listing_a_database_opens_no_connection_per_session(pushed, monkeypatch):
    """`journal ls URL` reads every session's ids (the entries column) on this process's
    shared connections: it opened a new connection per session (181 for 420 sessions, a
    login each on a real server)."""
    import psycopg

    from journal.catalog import database_rows
    from journal.prices import load_prices

    url, _ = pushed
    prices = load_prices()
    database_rows(url, prices)  # the shared connections are made
    opened: list[str] = []
    real = psycopg.connect

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(str(args[0]) if args else "")
        return real(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counting)  # what journal.pg.connect calls
    rows = database_rows(url, prices)
    assert len(rows) == 3 and opened == []
