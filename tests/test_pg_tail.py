"""Live tail of a database session: LISTEN/NOTIFY wake-ups, every entry once and in order,
across a rotation and a reset of the follower's connections, polling as a fallback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import psycopg  # noqa: E402

from journal import Session, follow, follow_events, load  # noqa: E402
from journal.cli import main  # noqa: E402
from journal.pg.url import session_url  # noqa: E402
from journal.seal import is_seal  # noqa: E402
from journal.tail import ENTRY, ROTATED  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

WRITER = textwrap.dedent("""
    import sys
    from journal import Session
    from journal.pg.rotation import rotate_database

    url, count, rotate_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    session = Session.open(url)
    kept = None
    for i in range(count):
        if i == rotate_at:
            session.append_compaction("all before", kept, 100)
            session.close()
            result = rotate_database(url)
            assert result.rotated, result.reason
            session = Session.open(url)  # the old id leads to the successor
        entry = session.append_message({"role": "user", "content": f"m{i}", "timestamp": 1})
        if i == rotate_at - 10:
            kept = entry
    session.close()
""")


def writer(url: str, count: int, rotate_at: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PGAPPNAME": "tail-writer"}
    return subprocess.Popen([sys.executable, "-c", WRITER, url, str(count), str(rotate_at)],
                            env=env)


def terminate(pg_url: str, application: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                            "application_name = %s AND pid <> pg_backend_pid()",
                            (application,)).fetchall()
    return len(rows)


def new_session(pg_url: str) -> str:
    url = session_url(pg_url, str(uuid.uuid4()))
    Session.create(url, cwd="/w").close()
    return url


@pytest.mark.slow
def test_ten_thousand_appends_arrive_once_in_order_across_rotation_and_reset(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    count, rotate_at, reset_at = 10_000, 6_000, 3_000
    monkeypatch.setenv("PGAPPNAME", "tail-follower")  # this process's connections
    url = new_session(pg_url)
    deadline = time.monotonic() + 240
    proc = writer(url, count, rotate_at)
    events = follow_events(url, from_start=True, timeout=2.0,
                           stop=lambda: time.monotonic() > deadline)
    texts: list[str] = []
    ids: list[str] = []
    rotated: list[str] = []
    killed = 0
    try:
        for event in events:
            if event.kind == ROTATED:
                rotated.append(event.detail)
            if event.kind != ENTRY or event.entry is None:
                continue
            ids.append(event.entry["id"])
            message = event.entry.get("message")
            if isinstance(message, dict) and str(message.get("content", "")).startswith("m"):
                texts.append(message["content"])
            if len(texts) == reset_at and not killed:
                killed = terminate(pg_url, "tail-follower")
            if len(texts) == count:
                break
    finally:
        events.close()
        proc.wait(timeout=120)
    assert proc.returncode == 0
    assert killed >= 2  # the shared read connection and the listening one
    assert texts == [f"m{i}" for i in range(count)]
    assert len(ids) == len(set(ids))  # nothing twice, the kept entries the successor repeats
    assert len(rotated) == 1 and "session=" in rotated[0]


def test_the_follower_wakes_on_notify_not_on_its_timeout(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.pg import storage as pg_storage

    def no_polling(*args: Any) -> Any:
        raise AssertionError("the follow polled")

    monkeypatch.setattr(pg_storage, "PostgresWatch", no_polling)
    url = new_session(pg_url)
    stop = threading.Event()
    got: list[float] = []

    def consume() -> None:
        for entry in follow(url, stop=stop, timeout=30.0):
            got.append(time.monotonic() - entry["message"]["timestamp"] / 1e3)
            if len(got) == 5:
                return

    thread = threading.Thread(target=consume)
    thread.start()
    time.sleep(0.5)
    with psycopg.connect(pg_url) as conn:  # the waiting follower registered itself
        row = conn.execute("SELECT count(*) FROM journal.followers WHERE session = %s",
                           (url.rsplit("=", 1)[1],)).fetchone()
    assert row is not None and row[0] == 1
    with Session.open(url) as session:
        for _ in range(5):
            session.append_message({"role": "user", "content": "hi",
                                    "timestamp": time.monotonic() * 1e3})
            time.sleep(0.05)
    thread.join(timeout=20)
    stop.set()
    assert len(got) == 5
    assert max(got) < 2.0  # far below the 30 s timeout: woken by the notification


def test_polling_follows_too(pg_url: str) -> None:
    url = new_session(pg_url)
    with Session.open(url) as session:
        session.append_message({"role": "user", "content": "one", "timestamp": 1})
    deadline = time.monotonic() + 20
    seen = []
    for event in follow_events(url, from_start=True, poll=True,
                               stop=lambda: time.monotonic() > deadline):
        if event.kind == ENTRY and event.entry is not None:
            seen.append(event.entry["message"]["content"])
            if len(seen) == 1:
                with Session.open(url) as session:
                    session.append_message({"role": "user", "content": "two", "timestamp": 1})
            if len(seen) == 2:
                break
    assert seen == ["one", "two"]


def test_tail_command_on_a_database_session(pg_url: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    url = new_session(pg_url)
    with Session.open(url) as session:
        for i in range(5):
            session.append_message({"role": "user", "content": f"line {i}", "timestamp": 1})
    assert main(["tail", url, "-n", "2", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    contents = [x.get("entry", x).get("message", {}).get("content") for x in lines]
    assert contents == ["line 3", "line 4"]
    assert main(["tail", session_url(url.split("?")[0], "missing"), "-n", "1"]) == 2
    assert capsys.readouterr().err.startswith("Error: ")


@pytest.mark.parametrize("follow", [[], ["-f"]])
def test_tail_of_a_whole_database_says_it_takes_one_session_and_how_to_name_it(
        pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        follow: list[str]) -> None:
    """A database is not a folder: there is no tail of all its sessions, and the error says
    so and how to name one, not that a session URL names exactly one session."""
    new_session(pg_url)
    monkeypatch.setenv("JOURNAL_DATABASE_URL", pg_url)
    for database, one in ((pg_url, f"{pg_url}?session=<id>"), ("pg:", "pg:<id>")):
        assert main(["tail", *follow, database]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err == (
            f"Error: {database}: a database: tail reads (and with -f follows) one of its "
            f"sessions, there is no tail of a whole database; name one: {one} ('journal ls "
            f"{database}' lists them)\n")


def test_tail_of_a_sealed_database_session_prints_its_own_last_entries(
        pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = new_session(pg_url)
    with Session.open(url) as session:
        ids = [session.append_message({"role": "user", "content": f"{i} {'x' * 2000}",
                                       "timestamp": 1}) for i in range(6)]
        session.append_compaction("summary", ids[3], 100)
        result = session.rotate()
        assert result.rotated, result.reason
        session.append_message({"role": "user", "content": "after", "timestamp": 1})
    own = load(url).entries  # the sealed session's, its seal last
    for extra in ([], ["--no-follow"]):
        assert main(["tail", url, "-n", "2", "--json", *extra]) == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert lines == own[-2:] and is_seal(lines[-1])
    events = list(follow_events(url, last=1, stop=lambda: True))
    assert [e.kind for e in events] == [ENTRY, ROTATED]


def _entries(events: Any) -> list[Any]:
    return [e for e in events if e.kind == ENTRY]


def test_afollow_a_database_session(pg_url: str) -> None:
    import asyncio

    from journal import afollow

    url = new_session(pg_url)

    async def main_loop() -> list[str]:
        seen: list[str] = []
        deadline = time.monotonic() + 20

        async def write() -> None:
            await asyncio.sleep(0.3)
            with Session.open(url) as session:
                for i in range(3):
                    session.append_message({"role": "user", "content": f"a{i}",
                                            "timestamp": 1})

        writer_task = asyncio.create_task(write())
        async for entry in afollow(url, stop=lambda: time.monotonic() > deadline):
            seen.append(entry["message"]["content"])
            if len(seen) == 3:
                break
        await writer_task
        return seen

    assert asyncio.run(main_loop()) == ["a0", "a1", "a2"]


def test_a_new_entry_in_a_database_successor_is_delivered_even_if_drawn_from_a_sealed_id(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss once seen in the 10,000-entry test (its odds were about one run in 180): a
    new entry in the successor drawn with an id of the sealed session was skipped as one that
    rotation copied. Two changes keep it from happening: the writer avoids the sealed
    session's ids (tests/test_pg_rotation.py shows that alone), and the follower skips by id
    only up to the seal's lastCopied; this test fails only without both."""
    from journal.pg.rotation import rotate_database
    from journal.tail import Follower

    url = new_session(pg_url)
    with Session.open(url) as session:
        early = session.append_message({"role": "user", "content": "early " + "x" * 20_000,
                                        "timestamp": 1})
        kept = session.append_message({"role": "user", "content": "kept", "timestamp": 1})
        session.append_compaction("summary", kept, 100)
    follower = Follower(url, grace=0.0)
    follower.open()
    try:
        assert rotate_database(url).rotated
        with Session.open(url) as session:
            session.append_message({"role": "user", "content": "first", "timestamp": 1})
            for thread in threading.enumerate():  # the sealed session's ids, gathered
                if thread.name == "journal-id-scan":
                    thread.join(10)
            draws = iter([int(early, 16), 0xABCDEF12])
            monkeypatch.setattr("journal.model.random.getrandbits", lambda n: next(draws))
            session.append_message({"role": "user", "content": "second", "timestamp": 1})
        got = [e.entry["message"]["content"] for e in follower.poll()
               if e.kind == ENTRY and e.entry is not None and e.entry.get("type") == "message"]
    finally:
        follower.close()
    assert got == ["first", "second"]


def test_a_follow_ended_by_sigterm_removes_its_registration(pg_url: str) -> None:
    """`journal tail -f URL` stopped with SIGTERM (a service manager's stop) ends as Ctrl-C
    ends it: its row in journal.followers is removed, not left to expire."""
    import signal

    url = new_session(pg_url)
    session = url.rsplit("=", 1)[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from journal.cli import tail_main; "
         "sys.exit(tail_main())", "-f", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})

    def followers() -> int:
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT count(*) FROM journal.followers WHERE session = %s",
                               (session,)).fetchone()
        return int(row[0]) if row else 0

    try:
        deadline = time.monotonic() + 30
        while followers() == 0 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert followers() == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 128 + signal.SIGTERM
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()
    assert "Traceback" not in err
    assert followers() == 0


def test_a_follower_waits_out_a_server_restart(
        caplog: pytest.LogCaptureFixture) -> None:
    """The server stops (fast: every connection ended), stays down a while, and starts
    again on the same port: the follower warns, keeps waiting, and delivers what is written
    before and after, each entry once, in order."""
    from journal.pg.server import EmbeddedServer

    with EmbeddedServer() as server:
        url = session_url(server.url(), "restarted")
        Session.create(url, cwd="/").close()
        stop = threading.Event()
        got: list[str] = []
        failed: list[BaseException] = []

        def follower() -> None:
            try:
                for entry in follow(url, stop=stop, timeout=0.2):
                    if entry.get("type") == "message":
                        got.append(entry["message"]["content"])
            except BaseException as e:  # noqa: BLE001 - the test reports it
                failed.append(e)

        def append(texts: list[str]) -> None:
            with Session.open(url) as session:
                for text in texts:
                    session.append_message({"role": "user", "content": text, "timestamp": 1})

        def delivered(count: int) -> None:
            deadline = time.monotonic() + 30
            while len(got) < count and not failed:
                assert time.monotonic() < deadline, got
                time.sleep(0.05)

        thread = threading.Thread(target=follower)
        thread.start()
        try:
            time.sleep(0.5)  # the follower is at the end
            append([f"before {i}" for i in range(5)])
            delivered(5)
            with caplog.at_level("WARNING", logger="journal.tail"):
                server.restart(pause=5.0)  # long enough to try listening again twice
                append([f"after {i}" for i in range(5)])
                delivered(10)
        finally:
            stop.set()
            thread.join(timeout=30)
        assert not failed, failed
        assert got == [f"before {i}" for i in range(5)] + [f"after {i}" for i in range(5)]
        messages = [r.getMessage() for r in caplog.records]
        assert any("reading on once it can be reached" in m for m in messages), messages
        assert any("reachable again" in m for m in messages), messages
        # each cause said once, however many times listening is tried while the server is
        # down (a fast shutdown may first refuse as 'shutting down', then the port is closed)
        causes = [m.split(" (", 1)[1].split("); polling")[0].split("; failing for ")[0]
                  for m in messages if "cannot listen for changes" in m]
        assert causes and len(causes) == len(set(causes)), messages


def test_following_a_database_without_the_schema_creates_none(pg_url: str) -> None:
    """The watch's listening connection, opened before the first read, is a reader's: a
    follow of a database nothing was stored in fails and leaves no schema there (the watch
    once made it)."""
    from journal.pg.connect import NoJournalSchema

    with pytest.raises(NoJournalSchema):
        for _ in follow(session_url(pg_url, "typo"), stop=lambda: True):
            pass
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'journal'"
                           ).fetchone()
    assert row is not None and row[0] == 0


@pytest.mark.parametrize("where", ["file", "database"])
def test_following_a_session_rotated_many_times_starts_at_its_live_end(
        pg_url: str, tmp_path: Path, where: str) -> None:
    """`tail -f OLD -n 2` of a session rotated three times since: the live session's last two
    entries, then on (said on stderr); it printed the old one's last two and then every
    entry of every successor since."""
    import signal

    name = session_url(pg_url, "many") if where == "database" else str(tmp_path / "many.jsonl")
    session = Session.create(name, cwd="/")
    texts = []
    for rotation in range(3):
        ids = [session.append_message({"role": "user", "content": f"{rotation}.{i} " + "x" * 900,
                                       "timestamp": 1}) for i in range(4)]
        session.append_compaction("summary", ids[-1], 100)
        result = (session.rotate() if where == "database"
                  else session.rotate(compress=False))
        assert result.rotated, result.reason
        texts.append(f"{rotation}.3")
    last = [session.append_message({"role": "user", "content": f"live {i}", "timestamp": 1})
            for i in range(2)]
    session.close()
    old = name if where == "database" else str(tmp_path / "archive" / "many.jsonl")
    tail = subprocess.Popen([sys.executable, "-m", "journal.cli", "tail", "-f", "-n", "2",
                             "--json", old], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        assert tail.stdout is not None
        got = [json.loads(tail.stdout.readline())["id"] for _ in range(2)]
    finally:
        tail.send_signal(signal.SIGTERM)
        _, err = tail.communicate(timeout=30)
    assert got == last
    assert "was rotated; following" in err


def test_a_followed_session_deleted_is_said_deleted_not_truncated(pg_url: str) -> None:
    """A session whose row was deleted while followed (out of band): the follower once
    said first "rewritten in place or truncated (from N to 0 bytes)", then "deleted". It
    says deleted only, as a tail of a deleted file does, and ends after the grace."""
    from journal.tail import DELETED, TRUNCATED

    url = new_session(pg_url)
    with Session.open(url) as session:
        session.append_message({"role": "user", "content": "one", "timestamp": 1})
    events: list[Any] = []
    started = threading.Event()

    def follower() -> None:
        for event in follow_events(url, from_start=True, timeout=0.1, grace=0.5,
                                   stop=lambda: len(events) > 20):
            events.append(event)
            started.set()

    thread = threading.Thread(target=follower)
    thread.start()
    assert started.wait(30)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DELETE FROM journal.streams WHERE session = %s",
                      (url.rpartition("session=")[2],))
    thread.join(30)
    assert not thread.is_alive()
    kinds = [e.kind for e in events]
    assert kinds[0] == ENTRY and DELETED in kinds and TRUNCATED not in kinds, events


def test_a_follower_waiting_for_a_server_says_when_the_cause_changes(
        caplog: pytest.LogCaptureFixture) -> None:
    """The server shuts down (smart: it waits for a last connection, refusing new ones as
    'shutting down'), then is gone ('Connection refused'): the follower's warning follows
    the cause, rather than repeating the first one while another holds; a cause said once
    is not said again while it lasts."""
    import pg_server

    from journal.pg.server import EmbeddedServer
    from journal.tail import Follower

    with EmbeddedServer() as server:
        url = session_url(server.url(), "waited")
        Session.create(url, cwd="/").close()
        follower = Follower(url)
        follower.open()
        try:
            list(follower.poll())

            def step() -> None:
                assert list(follower.poll()) == []

            with caplog.at_level("WARNING", logger="journal.tail"):
                pg_server.through_a_shutdown(server, step, 3)
        finally:
            follower.close()
    pg_server.said_in_turn([r.getMessage() for r in caplog.records
                            if r.name == "journal.tail"
                            and "reading on once it can be reached" in r.getMessage()])
