"""Sessions in PostgreSQL read and project exactly as the same bytes in a file: the pi
fixtures and generated sessions stored in the database give the same entries, diagnostics,
offsets and context through `load`, `resume`, `View` and `Session`; the bytes come back
identical; a session is named by URL or by `pg:<id>` in JOURNAL_DATABASE_URL."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
from third_party import pi_bytes  # noqa: E402

from journal import Session, View, WriteFailed, load, resume  # noqa: E402
from journal.context import build_context  # noqa: E402
from journal.pg import storage as pg_storage  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402
from journal.pg.url import session_url  # noqa: E402
from journal.snapshot import Snapshot  # noqa: E402
from journal.storage import Storage, as_storage  # noqa: E402
from journal.tree import Tree  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def gen_session() -> ModuleType:
    name = "bench_gen_session"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "gen_session.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def stored(url: str, name: str, data: bytes) -> Storage:
    storage = as_storage(session_url(url, name))
    storage.create(data)
    return storage


def stored_bytes(storage: Storage) -> bytes:
    with storage.open_reader() as reader:
        return reader.stream.read()


def facts(snap: Snapshot) -> dict[str, Any]:
    """Everything a snapshot says, but the name it was read under."""
    return {
        "header": snap.header, "entries": snap.entries, "size": snap.size, "end": snap.end,
        "complete": snap.complete, "lines": snap.lines,
        "diagnostics": [d.to_json() for d in snap.diagnostics],
        "field_issues": [d.to_json() for d in snap.field_issues],
    }


def same_as_file(storage: Storage, file: Path) -> None:
    assert stored_bytes(storage) == file.read_bytes()
    assert facts(load(storage)) == facts(load(file))
    assert facts(resume(storage)) == facts(resume(file))
    tree = Tree(load(file).entries)
    stored_tree = Tree(load(storage).entries)
    assert stored_tree.leaf_id == tree.leaf_id
    assert build_context(stored_tree, stored_tree.leaf_id) == build_context(tree, tree.leaf_id)
    assert View.open(storage).context() == View.open(file).context()
    assert View.open(storage, full=True).context(raw=True) == \
        View.open(file, full=True).context(raw=True)


@pytest.mark.parametrize("name", ["all-types.jsonl", "before-compaction.jsonl",
                                  "large-session.jsonl"])
def test_a_pi_fixture_in_the_database_reads_as_the_file(
        pg_url: str, tmp_path: Path, name: str) -> None:
    data = pi_bytes(name)
    file = tmp_path / name
    file.write_bytes(data)
    same_as_file(stored(pg_url, name, data), file)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_generated_session_reads_as_the_file_and_goes_on_the_same_way(
        pg_url: str, tmp_path: Path, seed: int) -> None:
    gs = gen_session()
    file = tmp_path / "gen.jsonl"
    gs.generate(file, target_bytes=2 * gs.MB, seed=seed, compaction_every_bytes=300 * gs.KB,
                branch_every=5)
    storage = stored(pg_url, f"gen{seed}", file.read_bytes())
    same_as_file(storage, file)
    # both opened for writing from their tails, the same turn appended to each
    for target in (file, storage):
        with Session.open(target) as session:
            assert not session.tree.complete
            session.append_message({"role": "user", "content": "go on", "timestamp": 1})
            session.append_message({"role": "assistant", "timestamp": 2, "provider": "p",
                                    "model": "m", "stopReason": "stop",
                                    "content": [{"type": "text", "text": "done"}]})
    # the new entries' ids are random: the same messages, the same boundary
    here, there = View.open(storage).context(), View.open(file).context()
    assert here.messages == there.messages and here.fresh_from == there.fresh_from
    assert load(storage).entries[-2:][0]["message"]["content"] == "go on"


def test_a_session_made_in_the_database_is_resumed_from_its_tail(pg_url: str) -> None:
    url = session_url(pg_url, "made-here")
    with Session.create(url, cwd="/work") as session:
        assert session.path == url
        for n in range(30):
            session.append_message({"role": "user", "content": f"old {n}", "timestamp": 1})
        session.append_model_change("anthropic", "m")
        session.append_thinking_level_change("high")
        kept = session.append_message({"role": "user", "content": "kept", "timestamp": 1})
        session.append_compaction("before 'kept'", kept, 1000)
        session.append_model_change("anthropic", "m")
        session.append_thinking_level_change("high")
        last = session.append_message({"role": "user", "content": "after", "timestamp": 1})
        made = session.context(raw=True).messages
    snap = resume(url)
    assert snap.complete is False and len(snap.entries) < 10
    with Session.open(url) as session:
        assert session.leaf_id == last
        assert session.context(raw=True).messages == made
    tree = Tree(load(url).entries)
    assert build_context(tree, tree.leaf_id).messages == made


def test_resume_reads_the_tail_in_one_query_from_the_stream_row(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream row keeps where the latest compaction's kept entries start, so the tail a
    resume needs (here 2 MB) comes in one query, not block by block backwards."""
    storage = as_storage(session_url(pg_url, "long"))
    with Session.create(storage, cwd="/") as session:
        for n in range(200):
            session.append_message({"role": "user", "content": f"before {n}", "timestamp": 1})
        kept = session.append_message({"role": "user", "content": "kept", "timestamp": 1})
        for n in range(400):
            session.append_message({"role": "user", "content": "x" * 5000, "timestamp": n})
        session.append_compaction("summary", kept, 1000)
        session.append_model_change("anthropic", "m")
        session.append_thinking_level_change("low")
    queries: list[tuple[int, int]] = []
    real = pg_storage.PostgresReader._rows

    def counted(self: pg_storage.PostgresReader, start: int, end: int) -> tuple[int, bytes]:
        queries.append((start, end))
        return real(self, start, end)

    monkeypatch.setattr(pg_storage.PostgresReader, "_rows", counted)
    snap = resume(storage)
    assert snap.entries[0]["id"] == kept and not snap.complete
    assert len(queries) <= 2, queries  # the tail from the kept entry on, and the header


def test_pg_names_a_session_in_the_default_database(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_DATABASE_URL", pg_url)
    with Session.create("pg:short", cwd="/") as session:
        entry = session.append_message({"role": "user", "content": "hi", "timestamp": 1})
    storage = as_storage("pg:short")
    assert isinstance(storage, PostgresStorage) and storage.session == "short"
    assert [e["id"] for e in load(session_url(pg_url, "short")).entries] == [entry]
    monkeypatch.delenv("JOURNAL_DATABASE_URL")
    with pytest.raises(Exception, match="JOURNAL_DATABASE_URL"):
        as_storage("pg:short")


def test_a_view_takes_in_appends_and_replacements(pg_url: str) -> None:
    url = session_url(pg_url, "viewed")
    with Session.create(url, cwd="/") as session:
        first = session.append_message({"role": "user", "content": "one", "timestamp": 1})
        view = View.open(url)
        assert view.leaf_id == first and view.refresh() == []
        second = session.append_message({"role": "user", "content": "two", "timestamp": 1})
        assert [e["id"] for e in view.refresh()] == [second]
    storage = as_storage(url)
    header = stored_bytes(storage).split(b"\n")[0] + b"\n"
    storage.publish(header, "test")
    assert view.refresh() == [] and view.leaf_id is None


def test_import_journal_loads_no_driver_until_a_database_is_named(pg_url: str) -> None:
    import subprocess

    code = ("import sys, journal\n"
            "from journal.storage import as_storage\n"
            "as_storage('x.jsonl')\n"
            "before = 'psycopg' in sys.modules\n"
            f"as_storage({session_url(pg_url, 'n')!r})\n"
            "print(before, 'psycopg' in sys.modules, journal.PostgresStorage.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.stdout.split() == ["False", "True", "PostgresStorage"], out.stderr


@pytest.mark.parametrize(("data", "why"), [
    (b'{"type":"custom","id":"a"}', "whole lines"),
    (b'{"type":"custom","id":"\xff"}\n', "UTF-8"),
    (b'{"type":"custom","id":"a\x00"}\n', "NUL"),
])
def test_bytes_a_text_column_cannot_hold_are_refused_whole(
        pg_url: str, data: bytes, why: str) -> None:
    storage = stored(pg_url, "refused", b'{"type":"session","version":3,"id":"r","cwd":"/"}\n')
    before = stored_bytes(storage)
    appender = storage.open_appender()
    try:
        with pytest.raises(WriteFailed, match=why):
            appender.commit(b'{"type":"custom","id":"ok"}\n' + data)
    finally:
        appender.close()
    assert stored_bytes(storage) == before


def test_a_resumed_session_learns_the_older_ids_from_the_id_column(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.idscan import IdScan

    storage = as_storage(session_url(pg_url, "ids"))
    with Session.create(storage, cwd="/") as session:
        ids = [session.append_message({"role": "user", "content": f"m{n}", "timestamp": 1})
               for n in range(50)]
    assert isinstance(storage, PostgresStorage)
    assert storage.entry_ids() == {int(i, 16) for i in ids}

    def no_bulk_read(self: object, start: int, end: int) -> tuple[int, bytes]:
        raise AssertionError("the id scan read the session's lines")

    monkeypatch.setattr(pg_storage.PostgresReader, "_rows", no_bulk_read)
    scan = IdScan(storage)
    assert scan.wait(10) and all(i in scan for i in ids) and "ffffffff" not in scan


def test_the_stream_row_keeps_the_offsets_a_resume_starts_from(pg_url: str) -> None:
    import psycopg

    url = session_url(pg_url, "offsets")
    with Session.create(url, cwd="/") as session:
        session.append_message({"role": "user", "content": "a", "timestamp": 1})
        session.append_model_change("anthropic", "m")
        kept = session.append_message({"role": "user", "content": "b", "timestamp": 1})
        session.append_thinking_level_change("high")
        compaction = session.append_compaction("sum", kept, 10)  # settings follow it
        session.append_message({"role": "user", "content": "c", "timestamp": 1})
    entries = load(url).entries
    model = [e["id"] for e in entries if e["type"] == "model_change"][-1]
    thinking = [e["id"] for e in entries if e["type"] == "thinking_level_change"][-1]
    storage = as_storage(url)
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(storage.conninfo) as conn:
        offsets = dict(conn.execute(
            "SELECT e.id, e.byte_offset FROM journal.entries e JOIN journal.streams s "
            "ON s.id = e.stream AND s.generation = e.generation "
            "WHERE s.session = 'offsets'").fetchall())
        row = conn.execute("SELECT last_compaction, last_kept, last_model_change, "
                           "last_thinking_change FROM journal.streams "
                           "WHERE session = 'offsets'").fetchone()
    assert row == (offsets[compaction], offsets[kept], offsets[model], offsets[thinking])
    # a replacement computes them from its own bytes
    storage.publish(stored_bytes(storage), "test")
    with psycopg.connect(storage.conninfo) as conn:
        again = conn.execute("SELECT last_compaction, last_kept, last_model_change, "
                             "last_thinking_change FROM journal.streams "
                             "WHERE session = 'offsets'").fetchone()
    assert again == row


TRICKY = ['"', "\\", '\\"', "{}", "{a,b}", ",", "NULL", "null", "", " padded ", "\t\n\r",
          "é 漢字 🙂", '{"type":"message","content":"say \\"hi\\" \\\\ {x}"}', None]


def test_array_literals_reach_the_server_as_the_values(pg_url: str) -> None:
    import psycopg

    values = [*TRICKY, *(a + b for a in TRICKY[:6] for b in TRICKY[:6] if a and b)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT %s::text[]", (pg_storage.text_array(values),)).fetchone()
        assert row is not None and row[0] == values
        one = conn.execute("SELECT %s::text[]", (pg_storage.text_array([None]),)).fetchone()
        assert one is not None and one[0] == [None]


def test_lines_with_quotes_and_backslashes_are_stored_verbatim(pg_url: str) -> None:
    url = session_url(pg_url, "tricky")
    with Session.create(url, cwd="/") as session:
        for text in TRICKY:
            if text is not None:
                session.append_message({"role": "user", "content": text, "timestamp": 0})
    data = PostgresStorage(pg_url, "tricky").open_reader().stream.read()
    loaded = load(url)
    assert [e["message"]["content"] for e in loaded.entries if e["type"] == "message"] == [
        t for t in TRICKY if t is not None]
    assert data.count(b"\n") == len(loaded.entries) + 1


def test_one_plain_entry_and_a_batch_are_stored_alike(pg_url: str) -> None:
    """A single plain entry goes as one statement (schema.APPEND_ONE), a batch or a
    compaction through journal.append: the rows, positions and offsets come out the same."""
    import psycopg

    from journal import NotASession

    storage = stored(pg_url, "alike", b'{"type":"session","version":3,"id":"alike",'
                     b'"timestamp":"t","cwd":"/"}\n')
    lines = [b'{"type":"custom","id":"a1","customType":"x"}\n',  # one: the statement
             b'{"type":"custom","id":"b1","parentId":"a1","customType":"x"}\n'
             b'{"type":"custom","id":"b2","parentId":"b1","customType":"x"}\n',  # a batch
             b'{"type":"custom","id":"c1","parentId":"b2","customType":"y"}\n',
             b'{"type":"compaction","id":"d1","parentId":"c1","summary":"s",'
             b'"firstKeptEntryId":"c1","tokensBefore":1}\n',
             b'"not an entry"\n']  # no id: sent once, as the statement
    header_size = storage.size()
    lease = storage.lock(5)  # the one-entry statement is a fenced writer's
    appender = storage.open_appender()
    offsets = [appender.commit(data) for data in lines]
    appender.close()
    lease.release()
    assert offsets == [header_size + sum(map(len, lines[:k])) for k in range(len(lines))]
    assert stored_bytes(storage).endswith(b"".join(lines))
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(storage.conninfo) as conn:
        rows = conn.execute(
            "SELECT e.position, e.byte_offset, e.id, e.parent_id, e.type FROM journal.entries e "
            "JOIN journal.streams s ON s.id = e.stream AND s.generation = e.generation "
            "WHERE s.session = 'alike' ORDER BY e.position").fetchall()
        stream = conn.execute("SELECT size, entries, last_compaction, last_kept FROM "
                              "journal.streams WHERE session = 'alike'").fetchone()
    assert [r[0] for r in rows] == list(range(7))
    assert [(r[2], r[3], r[4]) for r in rows[1:]] == [
        ("a1", None, "custom"), ("b1", "a1", "custom"), ("b2", "b1", "custom"),
        ("c1", "b2", "custom"), ("d1", "c1", "compaction"), (None, None, None)]
    at = {r[2]: r[1] for r in rows}
    assert stream == (len(stored_bytes(storage)), 7, at["d1"], at["c1"])
    with psycopg.connect(storage.conninfo, autocommit=True) as conn:
        conn.execute("DELETE FROM journal.streams WHERE session = 'alike'")
    appender = storage.open_appender()
    with pytest.raises(NotASession):
        appender.commit(lines[0])
    appender.close()


def test_the_one_entry_statement_reads_no_entry_and_no_stream_row(pg_url: str) -> None:
    """The one-entry statement reads no line of the session (the writer sends the end it
    knows) and no stream row (the lease's advisory lock fences it), whatever the session's
    length, and its looking variant only journal.followers by key; where a session ends is
    one backward probe of the entries' primary key (a sort of the session's rows grew with
    its length: seen at 400 us a commit after 2,000 entries)."""
    import psycopg

    from journal.pg import schema

    storage = stored(pg_url, "planned", b'{"type":"session","version":3,"id":"planned",'
                     b'"timestamp":"t","cwd":"/"}\n')
    appender = storage.open_appender()
    for i in range(20):
        appender.commit(b'{"type":"custom","id":"p%07d","customType":"x"}\n' % i)
    appender.close()
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(storage.conninfo, autocommit=True) as conn:
        # planned as for a long session (on a short one a whole read may cost less)
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("PREPARE one (bigint, bigint, bigint, bigint, text, text, text, text, "
                     "text, bigint, boolean) AS " + schema.APPEND_ONE)
        conn.execute("PREPARE looking (bigint, bigint, bigint, bigint, text, text, text, "
                     "text, text, bigint) AS " + schema.APPEND_LOOKING)
        plan = "\n".join(row[0] for row in conn.execute(
            "EXPLAIN EXECUTE one (1, 1, 21, 9999, '{}', 'p9999999', NULL, 'custom', "
            "'planned', 1, true)").fetchall())
        looking = "\n".join(row[0] for row in conn.execute(
            "EXPLAIN EXECUTE looking (1, 1, 21, 9999, '{}', 'p9999999', NULL, 'custom', "
            "'planned', 1)").fetchall())
        end_plan = "\n".join(row[0] for row in conn.execute(
            f"EXPLAIN SELECT e.* FROM {schema.STREAMS_WITH_END} "
            f"WHERE s.session = 'planned'").fetchall())
    # (the append gate is a one-row subquery of a function call: no table)
    assert [line.strip().split("  (")[0] for line in plan.splitlines() if "Scan" in line] == [
        "->  Subquery Scan on gate"], plan
    tables = [line.strip() for line in looking.splitlines()
              if "Scan" in line and "Subquery Scan on gate" not in line]
    assert tables and all(" on followers" in line for line in tables), looking
    assert "followers_pkey" in looking, looking
    reads = [line.strip() for line in end_plan.splitlines() if " on entries " in line]
    assert reads and all(line.startswith("->  Index Scan Backward using entries_pkey")
                         for line in reads), end_plan
    assert "Sort" not in end_plan, end_plan


def test_an_appender_prepares_its_statement_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new appender's first commits pay less for planning (about a quarter of a millisecond
    each, on the 2-core machine): the one-entry statement is prepared on first use, so the
    server plans it for its first five executions and then keeps a generic plan (6 plans for
    11 commits; prepared on the fifth use, psycopg's default, it was 10). pg_stat_statements,
    on a server of this test's own, counts the plans."""
    import psycopg

    from journal import Durability
    from journal.pg import storage as pg_storage
    from journal.pg.server import EmbeddedServer

    # one look for followers in the first commit only, however slowly the machine commits
    monkeypatch.setattr(pg_storage, "ANNOUNCE_LAG", 3600.0)
    with EmbeddedServer(settings={
            "shared_preload_libraries": "pg_stat_statements",
            "pg_stat_statements.track_planning": "on"}) as server:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        storage = stored(server.url(), "planned-once", b'{"type":"session","version":3,'
                         b'"id":"p","timestamp":"t","cwd":"/"}\n')
        lease = storage.lock(5)
        appender = storage.open_appender(Durability.always())
        try:
            for i in range(12):
                appender.commit(b'{"type":"custom","id":"q%07d","customType":"x"}\n' % i)
            assert appender.setting("plan_cache_mode") == "auto"  # journal.append's plans
        finally:
            appender.close()
            lease.release()
        with psycopg.connect(server.url(), autocommit=True) as conn:
            counted = conn.execute("SELECT calls, plans FROM pg_stat_statements "
                                   "WHERE query LIKE 'INSERT INTO journal.entries %'").fetchall()
    # the first commit also looks whether the session is followed (a statement of its own)
    assert sorted(counted) == [(1, 1), (11, 6)]


def test_a_message_queued_for_a_database_session_waits_in_this_users_inbox_for_it(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`journal-agent queue pg:<id>` (or a runner's `steer`) on a database session: the
    message goes into an inbox on this machine, in this user's private folder, named by the
    session's URL however it was spelt, where a runner on the session reads it. It once made
    a folder named like the URL in the working directory ('postgresql:/...inbox')."""
    import os

    from agent.cli import main
    from agent.steering import read_inbox
    from journal.lineage import database_inboxes
    from journal.pg.url import parse_url

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("JOURNAL_DATABASE_URL", pg_url)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    url = session_url(pg_url, "steered")
    Session.create(url, cwd="/").close()
    assert main(["queue", "pg:steered", "look at b.py too"]) == 0
    assert capsys.readouterr().out.startswith("queued a steering message (")
    [(_, item)] = read_inbox(parse_url(url).url)  # as the runner's session names it
    assert item.text == "look at b.py too"
    assert sorted(os.listdir(tmp_path)) == ["run"]  # nothing in the working directory
    root = database_inboxes()
    assert root.startswith(str(tmp_path / "run")) and os.stat(root).st_mode & 0o077 == 0
    assert main(["queue", "pg:no-such", "hi"]) == 2
    assert "no such session" in capsys.readouterr().err


def test_every_spelling_of_a_database_session_queues_into_the_inbox_its_agent_reads(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A message queued with the session's URL spelt otherwise than the agent's (another host
    name for the server, the other scheme, a password in the URL or as a parameter, the
    `pg:` form) reaches the agent: each spelling once had its own inbox, never read."""
    from urllib.parse import urlsplit

    from agent.cli import main
    from agent.steering import read_inbox
    from journal.pg.url import parse_url

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("JOURNAL_DATABASE_URL", pg_url)
    url = session_url(pg_url, "spelt")
    Session.create(url, cwd="/").close()
    parts = urlsplit(pg_url)
    assert parts.hostname == "127.0.0.1"
    other_host = pg_url.replace("@127.0.0.1:", "@localhost:", 1)
    spellings = [
        "pg:spelt",
        session_url(other_host, "spelt"),
        session_url(pg_url.replace("postgresql://", "postgres://", 1), "spelt"),
        session_url(pg_url.replace("postgres@", "postgres:any-password@", 1), "spelt"),
        f"{pg_url}?password=any-password&session=spelt",
    ]
    for i, spelling in enumerate(spellings):
        assert main(["queue", spelling, f"message {i}"]) == 0, capsys.readouterr().err
    got = sorted(item.text for _, item in read_inbox(parse_url(url).url))
    assert got == [f"message {i}" for i in range(len(spellings))]


def test_an_inbox_folder_others_can_open_is_refused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from journal.errors import UnsafeFile
    from journal.lineage import database_inboxes

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    planted = tmp_path / f"journal-inboxes-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # made by someone else to read or plant messages
    with pytest.raises(UnsafeFile, match="not this user's own private folder"):
        database_inboxes()


def compacted(session: Session) -> None:
    """Thirty messages, then a compaction keeping the last three: a session that rotates."""
    kept = None
    for i in range(30):
        entry = session.append_message({"role": "user", "content": f"m{i} " + "x" * 200,
                                        "timestamp": 1})
        kept = entry if i == 27 else kept
    session.append_compaction("summary", kept, tokens_before=10)


def test_repair_rotate_and_lineage_take_a_database_url_as_they_take_a_path(
        pg_url: str) -> None:
    """`journal.repair`, `journal.rotate` and `journal.lineage` took a URL for a relative
    file path ('.../postgresql:/...: no such file'); as the commands do, they take either."""
    import journal

    url = session_url(pg_url, "anywhere")
    with Session.create(url, cwd="/") as session:
        compacted(session)
    assert not journal.repair(url).changed
    with pytest.raises(journal.NotASession, match="a pi session, not a Claude Code"):
        journal.repair(url, dialect="claude")
    with pytest.raises(journal.JournalError, match="is for files"):
        journal.rotate(url, compress=False)
    result = journal.rotate(url)
    assert result.rotated and result.successor is not None
    chain = journal.lineage(url)
    assert chain[0].endswith("session=anywhere") and chain[-1] == result.successor
    with pytest.raises(journal.JournalError, match="names a database, not a session"):
        journal.lineage(pg_url)


def test_a_view_of_a_database_session_follows_it_into_its_successor(pg_url: str) -> None:
    """A View of a database session a rotation sealed stayed on the sealed one, stale and
    silent: a refresh that finds it sealed moves on to the live successor, also when the
    session was replaced (a new generation) before the rotation. Opened, a sealed session is
    read as it is named (an archive file is too); follow=False keeps to it."""
    from journal.pg.storage import PostgresStorage

    url = session_url(pg_url, "viewed")
    with Session.create(url, cwd="/") as session:
        compacted(session)
    view = View.open(url)
    stored = PostgresStorage.from_url(url)
    with stored.open_reader() as reader:
        stored.publish(reader.stream.read(), "same")  # a new generation, same bytes
    with Session.open(url) as session:
        assert session.rotate().rotated
        session.append_message({"role": "user", "content": "after the rotation",
                                "timestamp": 1})
        live = session.path
    view.refresh()
    assert view.path == live
    assert view.context().messages[-1]["content"] == "after the rotation"
    archive = View.open(url)
    assert archive.path != live and archive.context().messages[-1]["content"] != (
        "after the rotation")
    archive.refresh()
    assert archive.path == live
    kept_to = View.open(url, follow=False)
    kept_to.refresh()
    assert kept_to.path != live


def test_a_closed_database_session_says_it_is_closed(pg_url: str) -> None:
    """After close, an append and a rotation said the appender was closed and that another
    writer had taken the session over; as for a file, SessionClosed."""
    from journal import SessionClosed

    url = session_url(pg_url, "closed")
    session = Session.create(url, cwd="/")
    kept = session.append_message({"role": "user", "content": "a", "timestamp": 1})
    session.append_compaction("summary", kept, tokens_before=1)
    session.close()
    with pytest.raises(SessionClosed):
        session.append_message({"role": "user", "content": "b", "timestamp": 1})
    with pytest.raises(SessionClosed):
        session.rotate()


def test_current_holder_names_a_database_sessions_lease_holder(pg_url: str) -> None:
    """journal.current_holder(url) said None while a writer held the session (it read a
    lock file named like the URL); it names the lease holder, as `inspect` does."""
    import os

    import journal

    url = session_url(pg_url, "held")
    with Session.create(url, cwd="/"):
        holder = journal.current_holder(url)
        assert holder is not None and holder["pid"] == os.getpid()
    assert journal.current_holder(url) is None


def test_an_endless_lock_timeout_waits_on_a_database_too(pg_url: str) -> None:
    """lock_timeout=inf (wait for ever) works for a file; on a database it raised
    OverflowError making the server's lock_timeout."""
    url = session_url(pg_url, "patient")
    Session.create(url, cwd="/").close()
    with Session.open(url, lock_timeout=float("inf")) as session:
        session.append_message({"role": "user", "content": "a", "timestamp": 1})


ASSISTANT = {"role": "assistant", "content": [{"type": "text", "text": "answer"}],
             "provider": "anthropic", "model": "claude-sonnet-4-5", "timestamp": 2}


def both(pg_url: str, folder: Path, name: str) -> list[Session]:
    """The same new session as a file and in the database."""
    return [Session.create(str(folder / f"{name}.jsonl"), cwd="/w"),
            Session.create(session_url(pg_url, name), cwd="/w")]


def test_a_database_session_rotates_the_branch_it_is_on_as_a_file_session_does(
        pg_url: str, tmp_path: Path) -> None:
    """After `branch()` to an entry before the compaction, a file session has nothing to
    rotate; a database session rotated the branch of its last line, and its next append went
    there (the context changed under the writer)."""
    outcomes = []
    for session in both(pg_url, tmp_path, "branched"):
        with session:
            first = session.append_message({"role": "user", "content": "one " + "a" * 3000,
                                            "timestamp": 1})
            kept = session.append_message({"role": "user", "content": "two", "timestamp": 1})
            session.append_compaction("summary", kept, 10)
            session.append_message({"role": "user", "content": "three", "timestamp": 1})
            session.branch(first)
            result = session.rotate()
            new = session.append_message({"role": "user", "content": "four", "timestamp": 1})
            context = session.context()
            outcomes.append((result.rotated, result.reason,
                             session.get_entry(new)["parentId"] == first,
                             [m.get("content") for m in context.messages]))
    file_outcome, database_outcome = outcomes
    assert file_outcome == database_outcome
    assert file_outcome[0] is False and file_outcome[2]


def test_every_way_of_rotating_writes_one_successor_for_files_and_databases(
        pg_url: str, tmp_path: Path) -> None:
    """A model named only by an assistant reply before the kept entries, and set again after
    the compaction: every way of rotating (a writer's `Session.rotate` plans from its whole
    tree, `journal.rotate` from a resume's tail), of a file or a database session, makes one
    successor. The whole tree once carried the reply's model as well, 154 bytes more: near
    the 1 KiB threshold one backend rotated and the other refused."""
    import journal

    successors = []
    for how in ("Session.rotate", "journal.rotate"):
        for session in both(pg_url, tmp_path, how.replace(".", "-")):
            session.append_message({"role": "user", "content": "q " + "a" * 3000,
                                    "timestamp": 1})
            session.append_message(ASSISTANT)
            kept = session.append_message({"role": "user", "content": "kept", "timestamp": 3})
            session.append_compaction("summary", kept, 9)
            if how == "Session.rotate":
                result = session.rotate()
                session.close()
            else:
                session.close()
                result = journal.rotate(session.path)
            assert result.rotated, result.reason
            successor = journal.load(result.successor)
            header = len(orjson.dumps(successor.header)) + 1  # names differ: file, session id
            successors.append(([e["type"] for e in successor.entries],
                               result.successor_size - header))
    assert len(successors) == 4 and all(x == successors[0] for x in successors), successors


def test_a_line_with_a_lone_surrogate_is_indexed_like_any_other(pg_url: str) -> None:
    """A message or compaction holding a lone surrogate (escaped in its line, as pi writes
    it) gets its id, parentId and type columns and moves the resume offsets: they were
    stored NULL (the driver's parser refused the line), so a successor could reuse its id
    and `ls` counted one entry fewer."""
    import psycopg

    url = session_url(pg_url, "surrogates")
    with Session.create(url, cwd="/") as session:
        first = session.append_message({"role": "user", "content": "lone \udc00 surrogate",
                                        "timestamp": 1})
        compaction = session.append_compaction("summary with a lone \ud83d", first, 10)
    storage = PostgresStorage.from_url(url)
    assert {int(first, 16), int(compaction, 16)} <= (storage.entry_ids() or set())
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT e.id, e.type FROM journal.entries e JOIN journal.streams s "
                            "ON s.id = e.stream WHERE s.session = 'surrogates' "
                            "ORDER BY e.position").fetchall()
        offset = conn.execute("SELECT last_compaction FROM journal.streams "
                              "WHERE session = 'surrogates'").fetchone()
    assert (first, "message") in rows and (compaction, "compaction") in rows
    assert offset is not None and offset[0] is not None
