"""One writer per session across processes and connections, with real processes over TCP to
the run's PostgreSQL server: contending writers are serialized, a writer whose lease was
taken over is fenced off, a writer SIGKILLed mid-append loses no acknowledged entry and
leaves no partial batch, and a commit retried after its acknowledgement was lost is stored
once."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import psycopg  # noqa: E402
from pg_server import statement_counts  # noqa: E402

from journal import Durability, Session, inspect, load  # noqa: E402
from journal.errors import JournalError, LeaseLost, LockTimeout  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402
from journal.pg.url import session_url  # noqa: E402
from journal.storage import as_storage  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKER = str(HERE / "pg_worker.py")
ENV = {**os.environ, "PYTHONPATH": f"{HERE.parent}{os.pathsep}{HERE}"}


def worker(*args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, WORKER, *args], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)


def texts(url: str) -> list[str]:
    return [e["message"]["content"] for e in load(url).entries if e["type"] == "message"]


def stored_ids(url: str) -> list[str]:
    """The entry ids of a session's lines after its header, in order, from the table."""
    storage = as_storage(url)
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(storage.conninfo) as conn:
        rows = conn.execute(
            "SELECT e.id FROM journal.entries e JOIN journal.streams s ON s.id = e.stream "
            "AND s.generation = e.generation WHERE s.session = %s AND e.position > 0 "
            "ORDER BY e.position", (storage.session,)).fetchall()
    return [r[0] for r in rows]


def header_line(storage: PostgresStorage) -> bytes:
    """The session's header line, with its newline, as stored."""
    with psycopg.connect(storage.conninfo) as conn:
        row = conn.execute(
            "SELECT e.line FROM journal.entries e JOIN journal.streams s ON s.id = e.stream "
            "AND s.generation = e.generation WHERE s.session = %s AND e.position = 0",
            (storage.session,)).fetchone()
    assert row is not None
    return str(row[0]).encode() + b"\n"


def new_session(pg_url: str, name: str) -> str:
    url = session_url(pg_url, name)
    Session.create(url, cwd="/").close()
    return url


def test_four_processes_contending_for_one_session_are_serialized(pg_url: str) -> None:
    url = new_session(pg_url, "contended")
    turns = 5
    procs = [worker("contend", url, f"w{n}", str(turns)) for n in range(4)]
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert out.decode().split("\n")[:-1] == [f"turn {t}" for t in range(turns)]
    snap = load(url)
    entries = snap.entries
    assert len(entries) == 4 * turns * 4  # every entry of every writer is there
    # each entry continues the one before it (every writer resumed from the latest leaf)...
    assert all(e["parentId"] == p["id"] for p, e in zip(entries, entries[1:], strict=False))
    # ...and each turn's four commits are together and in order: no interleaving
    tags = [t.split() for t in texts(url)]
    for start in range(0, len(tags), 4):
        group = tags[start:start + 4]
        assert {(name, turn) for name, turn, _ in group} == {(group[0][0], group[0][1])}
        assert [k for _, _, k in group] == ["0", "1", "2", "3"]
    assert Counter(name for name, _, _ in tags) == {f"w{n}": turns * 4 for n in range(4)}
    # positions are gap-free and every byte offset follows the line before it
    storage = as_storage(url)
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(storage.conninfo) as conn:
        rows = conn.execute(
            "SELECT e.position, e.byte_offset, octet_length(e.line) FROM journal.entries e "
            "JOIN journal.streams s ON s.id = e.stream AND s.generation = e.generation "
            "WHERE s.session = 'contended' ORDER BY e.position").fetchall()
    assert [r[0] for r in rows] == list(range(len(rows))) == list(range(len(entries) + 1))
    assert all(b[1] == a[1] + a[2] + 1 for a, b in zip(rows, rows[1:], strict=False))
    assert storage.size() == rows[-1][1] + rows[-1][2] + 1


def test_an_appender_without_the_lease_is_not_refused_for_racing_the_holder(
        pg_url: str) -> None:
    """A process holding the lease appends one entry a commit as fast as it can while an
    appender without the lease (not fenced: journal.append every time) commits: the holder's
    one-entry statement does not take the row lock that orders journal.append's callers, so
    the unleased appender keeps losing the race for the end (before, about one commit in a
    hundred was refused with a unique violation). It commits until its locked call
    (LOCKED_APPEND) has run three times (or 6,000 entries): every commit goes through, and
    every entry is stored once."""
    url = new_session(pg_url, "racing")
    holder = worker("stream", url, "holder", stdin=subprocess.PIPE)
    assert holder.stdin is not None and holder.stdout is not None
    locked = "SELECT journal.append(%FOR UPDATE) AS locked"
    ids: list[str] = []
    try:
        assert holder.stdout.readline() == b"started\n", holder.stderr.read()
        appender = as_storage(url).open_appender(Durability.never())
        assert isinstance(appender.storage, PostgresStorage) and appender.epoch is None
        try:
            while len(ids) < 6000 and (len(ids) % 500 or statement_counts(pg_url, locked)[0] < 3):
                ids.append(f"u{len(ids):07d}")
                appender.commit(b'{"type":"custom","id":"%s","parentId":null,'
                                b'"timestamp":"t","customType":"x"}\n' % ids[-1].encode())
        finally:
            appender.close()
        holder.stdin.write(b"stop\n")
        holder.stdin.flush()
        said = holder.stdout.readline().decode().split()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert statement_counts(pg_url, locked)[0] >= 1  # the race was lost, and run locked
    assert said[0] == "appended"
    stored = stored_ids(url)
    counts = Counter(stored)
    assert all(counts[i] == 1 for i in ids)
    assert len(stored) == len(counts) == len(ids) + int(said[1])

def test_opening_a_missing_session_fails_and_leaves_nothing_behind(pg_url: str) -> None:
    from journal.pg.connect import connect

    connect(pg_url).close()  # the schema is there: the session is not
    url = session_url(pg_url, "missing")
    with pytest.raises(JournalError, match="no such session"):
        Session.open(url)
    storage = as_storage(url)
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(storage.conninfo) as conn:
        row = conn.execute("SELECT count(*) FROM journal.streams").fetchone()
    assert row is not None and row[0] == 0


def test_a_waiting_writer_times_out_naming_the_holder(pg_url: str) -> None:
    url = new_session(pg_url, "held")
    holder = worker("hold", url, "h", stdin=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        started = time.monotonic()
        with pytest.raises(LockTimeout) as caught:
            Session.open(url, lock_timeout=0.5)
        assert time.monotonic() - started >= 0.45
        assert caught.value.holder is not None
        assert caught.value.holder["pid"] == holder.pid
        assert caught.value.holder["host"] == socket.gethostname()
        since = caught.value.holder["since"]  # when it took the lease, as a lock file says it:
        assert re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", since), since  # ms
        assert f"pid {holder.pid} on {socket.gethostname()} since {since};" in str(caught.value)
        info = inspect(url)  # `journal info` names the holder too
        assert info.lock_holder == caught.value.holder
        # no lock file, but what `lockFile` says of a file's: a writer holds it (docs/cli.md)
        assert info.to_json()["lockFile"] == "held"
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10  # the server notices the closed connection at once,
    while inspect(url).lock_holder is not None:  # its backend ends a moment later
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # the dead holder's lease freed itself: no cleanup needed
    with Session.open(url, lock_timeout=10) as session:
        session.append_message({"role": "user", "content": "after", "timestamp": 1})


def test_a_writer_whose_connection_was_killed_is_fenced_after_a_takeover(pg_url: str) -> None:
    url = new_session(pg_url, "fenced")
    storage = as_storage(url)
    assert isinstance(storage, PostgresStorage)
    old = worker("hold", url, "old", stdin=subprocess.PIPE)
    assert old.stdin is not None and old.stdout is not None
    try:
        assert old.stdout.readline() == b"held\n"
        with psycopg.connect(storage.conninfo, autocommit=True) as admin:
            row = admin.execute("SELECT holder_backend, epoch FROM journal.streams "
                                "WHERE session = %s", ("fenced",)).fetchone()
            assert row is not None and row[0] is not None
            lease_backend, old_epoch = row
            # the old writer's lease connection dies; the old writer does not know
            admin.execute("SELECT pg_terminate_backend(%s)", (lease_backend,))
        with Session.open(url, lock_timeout=10) as session:  # the takeover
            session.append_message({"role": "user", "content": "new writer", "timestamp": 1})
            old.stdin.write(b"go\n")
            old.stdin.flush()
            assert old.stdout.readline() == b"refused LeaseLost\n"
            session.append_message({"role": "user", "content": "new writer again",
                                    "timestamp": 1})
    finally:
        old.kill()
        old.wait()
    assert texts(url) == ["old first", "new writer", "new writer again"]
    with psycopg.connect(storage.conninfo) as admin:
        row = admin.execute("SELECT epoch FROM journal.streams WHERE session = 'fenced'")
        epoch = row.fetchone()
    assert epoch is not None and epoch[0] > old_epoch


def test_an_appender_of_a_lease_taken_over_is_refused_in_process(pg_url: str) -> None:
    url = new_session(pg_url, "in-process")
    first = as_storage(url)
    lease = first.lock(5)
    appender = first.open_appender()
    appender.commit(b'{"type":"custom","id":"a1","customType":"x"}\n')
    lease.release()
    second = as_storage(url)
    second_lease = second.lock(5)
    try:
        with pytest.raises(LeaseLost):
            appender.commit(b'{"type":"custom","id":"a2","customType":"x"}\n')
    finally:
        appender.close()
        second_lease.release()
    assert stored_ids(url) == ["a1"]


@pytest.mark.parametrize("round_", range(3))
def test_a_writer_killed_mid_append_loses_no_acknowledged_entry_and_no_batch_is_partial(
        pg_url: str, round_: int) -> None:
    url = new_session(pg_url, f"killed{round_}")
    proc = worker("batches", url, "k")
    assert proc.stdout is not None
    acked: list[list[str]] = []
    deadline = time.monotonic() + 0.3 + 0.2 * round_
    while time.monotonic() < deadline or len(acked) < 3:
        line = proc.stdout.readline().decode().split()
        assert line and line[0] == "ack", proc.stderr.read() if proc.stderr else ""
        acked.append(line[2:])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for line in proc.stdout.read().decode().split("\n"):  # acks already written
        if line.startswith("ack "):
            acked.append(line.split()[2:])
    entries = load(url).entries
    stored = [e["id"] for e in entries]
    assert all(entry_id in stored for ids in acked for entry_id in ids)
    batches = Counter(int(e["message"]["content"].split()[1]) for e in entries)
    assert set(batches.values()) == {5}  # every batch whole
    assert sorted(batches) == list(range(len(batches)))  # and none missing before the last
    assert len(batches) >= len(acked)
    with Session.open(url) as session:  # and the session goes on
        session.append_message({"role": "user", "content": "k again", "timestamp": 1})


class DropReplyProxy:
    """A TCP relay to the server that, when armed, lets the next message holding `marker`
    reach the server and then cuts the connection instead of relaying the reply: the commit
    happened, its acknowledgement is lost. The marker is a value of the commit (the appender's
    statements are prepared: their text goes once, each execution carries only values): a
    line as it is (`"key":"value"`) is the one-entry statement's parameter; journal.append
    gets it inside an array literal, its quotes escaped (`\\"key\\":\\"value\\"`)."""

    def __init__(self, host: str, port: int, marker: bytes) -> None:
        self.target = (host, port)
        self.marker = marker
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.dropped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            state = {"cut": False}
            threading.Thread(target=self._pump, args=(client, upstream, state, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, state, False),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, state: dict[str, bool],
              upward: bool) -> None:
        try:
            while data := source.recv(65536):
                if upward and self.armed.is_set() and self.marker in data:
                    self.armed.clear()
                    state["cut"] = True
                elif not upward and state["cut"]:
                    self.dropped.set()  # the reply came: the commit is done; drop it
                    break
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()


def test_a_commit_whose_acknowledgement_was_lost_is_retried_and_stored_once(
        pg_url: str) -> None:
    url = new_session(pg_url, "dropped")
    direct = as_storage(url)
    assert isinstance(direct, PostgresStorage)
    host_port = direct.conninfo.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    proxy = DropReplyProxy(host, int(port), marker=b'\\"customType\\":\\"lose-its-reply\\"')
    try:
        relayed = PostgresStorage(direct.conninfo.replace(host_port, f"127.0.0.1:{proxy.port}"),
                                  "dropped")
        lease = relayed.lock(5)
        appender = relayed.open_appender(Durability.always())
        try:
            first = appender.commit(b'{"type":"custom","id":"b1","customType":"x"}\n')
            proxy.armed.set()
            batch = (b'{"type":"custom","id":"b2","customType":"lose-its-reply"}\n'
                     b'{"type":"custom","id":"b3","customType":"x"}\n')
            offset = appender.commit(batch)  # the reply is lost; the appender asks again
            assert proxy.dropped.is_set()
            assert offset == first + len(b'{"type":"custom","id":"b1","customType":"x"}\n')
            # a caller that retries on its own is acknowledged at the same offset too
            assert appender.commit(batch) == offset
        finally:
            appender.close()
            lease.release()
    finally:
        proxy.close()
    assert stored_ids(url) == ["b1", "b2", "b3"]
    assert direct.size() == offset + len(batch)


def test_a_commit_whose_socket_failed_without_libpq_calling_it_lost_is_retried(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A socket error libpq does not count as a lost connection (EINVAL, as a blackhole
    route gives; EACCES, as a prohibited one does) leaves psycopg's `broken` false. A batch
    committed before its reply failed that way was reported as "nothing of it was stored",
    and the appender went on using the dead connection (fuzz 51). It is a lost connection:
    the connection is made again and the batch found stored, acknowledged once."""
    url = new_session(pg_url, "einval")
    storage = as_storage(url)
    assert isinstance(storage, PostgresStorage)
    real_execute = psycopg.Cursor.execute
    armed = threading.Event()

    def execute_then_fail(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        result = real_execute(cursor, query, *args, **kwargs)
        if armed.is_set() and isinstance(query, str) and "journal.append(" in query:
            armed.clear()  # committed; its reply is read as a failed socket would fail it
            raise psycopg.OperationalError("consuming input failed: could not receive data "
                                           "from server: Invalid argument")
        return result

    monkeypatch.setattr(psycopg.Cursor, "execute", execute_then_fail)
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    try:
        first = appender.commit(b'{"type":"custom","id":"e1","customType":"x"}\n')
        armed.set()
        batch = (b'{"type":"custom","id":"e2","customType":"x"}\n'
                 b'{"type":"custom","id":"e3","customType":"x"}\n')
        offset = appender.commit(batch)
        assert not armed.is_set()  # it was failed as planned, and retried
        assert offset == first + len(b'{"type":"custom","id":"e1","customType":"x"}\n')
        after = appender.commit(b'{"type":"custom","id":"e4","customType":"x"}\n')
        assert after == offset + len(batch)
    finally:
        appender.close()
        lease.release()
    assert stored_ids(url) == ["e1", "e2", "e3", "e4"]


def test_one_entry_whose_acknowledgement_was_lost_is_stored_once_and_a_resend_too(
        pg_url: str) -> None:
    """The one-entry statement (schema.APPEND_ONE) loses its reply: the appender's retry and
    then its caller's own re-send are acknowledged at the offset the entry has."""
    url = new_session(pg_url, "dropped-one")
    direct = as_storage(url)
    assert isinstance(direct, PostgresStorage)
    host_port = direct.conninfo.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    proxy = DropReplyProxy(host, int(port), marker=b'"customType":"lose-its-reply"')
    one = b'{"type":"custom","id":"c2","customType":"lose-its-reply"}\n'
    try:
        relayed = PostgresStorage(direct.conninfo.replace(host_port, f"127.0.0.1:{proxy.port}"),
                                  "dropped-one")
        lease = relayed.lock(5)
        appender = relayed.open_appender(Durability.always())
        try:
            first = appender.commit(b'{"type":"custom","id":"c1","customType":"x"}\n')
            proxy.armed.set()
            offset = appender.commit(one)  # the reply is lost; the appender asks again
            assert proxy.dropped.is_set()
            assert offset == first + len(b'{"type":"custom","id":"c1","customType":"x"}\n')
            assert appender.commit(one) == offset  # the caller sends it again
            assert appender.commit(one) == offset
        finally:
            appender.close()
            lease.release()
    finally:
        proxy.close()
    assert stored_ids(url) == ["c1", "c2"]
    assert direct.size() == offset + len(one)


class CutProxy:
    """A TCP relay to the server that can cut a connection right after relaying the
    message holding `marker` (a value of the commit: the statement runs on, its client gone),
    and refuse new connections for a while (`refusing`). With `settle`, the cut waits that
    many seconds, dropping the server's replies, so that the server has read the message
    (a close with replies unread resets the connection, and the server may lose it). With
    `stall`, the message is held back that many seconds instead, and nothing is cut."""

    def __init__(self, host: str, port: int, marker: bytes, *, refuse: bool = True,
                 settle: float = 0.0, stall: float = 0.0) -> None:
        self.target = (host, port)
        self.marker = marker
        self.refuse = refuse  # refuse new connections once a statement was cut off
        self.settle = settle
        self.stall = stall
        self.armed = threading.Event()
        self.refusing = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing.is_set():
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            cut = threading.Event()
            threading.Thread(target=self._pump, args=(client, upstream, True, cut),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False, cut),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, upward: bool,
              cut: threading.Event) -> None:
        try:
            while data := source.recv(65536):
                if cut.is_set():
                    continue  # a reply to a client that is cut off
                hit = upward and self.armed.is_set() and self.marker in data
                if hit and self.stall:
                    self.armed.clear()
                    time.sleep(self.stall)
                if hit and not self.stall:  # cut before the message goes: no reply passes
                    self.armed.clear()
                    if self.refuse:
                        self.refusing.set()
                    cut.set()
                sink.sendall(data)
                if hit and not self.stall:
                    time.sleep(self.settle)
                    break  # the statement is on its way; its client is cut off
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()

    def close(self) -> None:
        self.listener.close()


def _relayed(url: str, proxy_port: int) -> tuple[PostgresStorage, PostgresStorage]:
    """(the session, the same session reached through a proxy on `proxy_port`)."""
    direct = as_storage(url)
    assert isinstance(direct, PostgresStorage)
    host_port = direct.conninfo.split("@", 1)[1].split("/", 1)[0]
    return direct, PostgresStorage(direct.conninfo.replace(host_port, f"127.0.0.1:{proxy_port}"),
                                   direct.session)


def _server(url: str) -> tuple[str, int]:
    direct = as_storage(url)
    assert isinstance(direct, PostgresStorage)
    host, port = direct.conninfo.split("@", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


def _waiting(conninfo: str, count: int) -> list[tuple[int, str]]:
    """(server process, statement) of the statements waiting for a lock, once `count` are."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for _ in range(200):
            # (a writer taking its lease again waits for an advisory lock: not counted)
            rows = conn.execute("SELECT pid, query FROM pg_stat_activity "
                                "WHERE wait_event_type = 'Lock' AND wait_event <> 'advisory'"
                                ).fetchall()
            if len(rows) >= count:
                return [(int(pid), str(query)) for pid, query in rows]
            time.sleep(0.05)
    raise AssertionError(f"fewer than {count} statements wait for a lock")


def _resend_behind_it(appender: Any, conninfo: str, holder: psycopg.Connection[Any]
                      ) -> list[int]:
    """Send U2 again while the first attempt still waits for the row `holder` holds, then let
    that attempt commit; the offsets the re-send was acknowledged at."""
    resent: list[int] = []
    sender = threading.Thread(target=lambda: resent.append(appender.commit(U2)), daemon=True)
    sender.start()
    _waiting(conninfo, 2)  # the first attempt, and the re-send behind it
    holder.commit()  # the first attempt commits, then the re-send goes on
    sender.join(timeout=30)
    return resent


def hold_lines(holder: psycopg.Connection[Any]) -> None:
    """Make every commit wait in the server until `holder`'s transaction ends: it takes a
    lock on journal.entries that every insert waits for (the one-entry statement does not
    wait for journal.append's lock on the stream row)."""
    holder.execute("LOCK TABLE journal.entries IN SHARE MODE")


def _holder(conninfo: str) -> psycopg.Connection[Any]:
    """A connection for a transaction that will hold up every commit (`hold_lines`). It is
    closed after LOCK_HELD_AT_MOST seconds whatever happens, so a statement the proxy failed
    to cut off commits and the test fails rather than waits for ever."""
    holder = psycopg.connect(conninfo)
    timer = threading.Timer(LOCK_HELD_AT_MOST, holder.close)
    timer.daemon = True
    timer.start()
    return holder


def _committing(appender: Any, data: bytes, outcomes: list[Any],
                kind: type[BaseException] = JournalError) -> threading.Thread:
    """A started thread committing `data` on `appender`; the offset it returns, or the
    `kind` error it raises, goes to `outcomes`."""

    def commit() -> None:
        try:
            outcomes.append(appender.commit(data))
        except kind as e:
            outcomes.append(e)

    thread = threading.Thread(target=commit, daemon=True)
    thread.start()
    return thread


LOCK_HELD_AT_MOST = 30.0
U1 = b'{"type":"custom","id":"u1","customType":"x"}\n'
U2 = b'{"type":"custom","id":"u2","customType":"cut-here"}\n'  # what CutProxy looks for


@dataclass
class HeldRow:
    """A session whose appender committed U1 through a CutProxy, armed to cut U2's one-entry
    statement, while another transaction (`holder`) holds up every commit (`hold_lines`)."""

    url: str
    proxy: CutProxy
    direct: PostgresStorage
    relayed: PostgresStorage
    holder: psycopg.Connection[Any]
    appender: Any
    first: int


@contextmanager
def row_held_and_cut_armed(pg_url: str, session: str, *, refuse: bool) -> Iterator[HeldRow]:
    url = new_session(pg_url, session)
    proxy = CutProxy(*_server(url), marker=b'"customType":"cut-here"', refuse=refuse)
    direct, relayed = _relayed(url, proxy.port)
    holder = _holder(direct.conninfo)
    lease = relayed.lock(5)
    try:
        appender = relayed.open_appender(Durability.always())
        first = appender.commit(U1)
        hold_lines(holder)
        proxy.armed.set()
        yield HeldRow(url, proxy, direct, relayed, holder, appender, first)
    finally:
        holder.close()  # first: nothing may be left waiting for the row it holds
        lease.release()
        proxy.close()


def test_a_resend_after_an_unconfirmed_commit_waits_for_it_and_stores_it_once(
        pg_url: str) -> None:
    """A fenced writer's commit is cut off while its statement waits in the server (another
    transaction holds it up) and no new connection can be made: WriteFailed, outcome
    unknown. The entry is sent again, by another appender under the same lease, while the first
    statement still waits: once that one commits, the re-sent entry is found, not stored a
    second time (after an unconfirmed commit this process goes through journal.append, whose
    insert at the same offset waits for the first one's and then finds it)."""
    from journal.errors import WriteFailed

    with row_held_and_cut_armed(pg_url, "unconfirmed", refuse=True) as held:
        with pytest.raises(WriteFailed, match="may have been committed"):
            held.appender.commit(U2)  # reaches the server, waits there; its client is cut off
        held.appender.close()
        held.proxy.refusing.clear()
        again = held.relayed.open_appender(Durability.always())
        resent = _resend_behind_it(again, held.direct.conninfo, held.holder)
        again.close()
    assert stored_ids(held.url) == ["u1", "u2"]
    assert resent == [held.first + len(U1)]


def test_an_unleased_resend_after_another_writers_line_is_stored_once(pg_url: str) -> None:
    """An appender without the lease loses the reply of a commit that the server made, and
    the lease holder appends after it before the batch is sent again: journal.append no
    longer finds the batch as the session's last, so it is found by its id (after where the
    appender's last acknowledged batch ended) and acknowledged where it is, not stored twice."""
    from journal.errors import WriteFailed

    url = new_session(pg_url, "unleased-resend")
    # journal.append (all an unleased appender calls) gets the line inside an array literal
    proxy = CutProxy(*_server(url), marker=b'\\"customType\\":\\"cut-here\\"', refuse=True)
    direct, relayed = _relayed(url, proxy.port)
    lease = direct.lock(5)
    holder = direct.open_appender(Durability.always())
    try:
        unleased = relayed.open_appender(Durability.always())
        assert unleased.epoch is None
        first = unleased.commit(U1)
        proxy.armed.set()
        with pytest.raises(WriteFailed, match="may have been committed"):
            unleased.commit(U2)  # reaches the server and commits; its reply never comes
        unleased.close()
        deadline = time.monotonic() + 10
        while "u2" not in stored_ids(url):
            assert time.monotonic() < deadline, "the cut commit never landed"
            time.sleep(0.02)
        holder.commit(b'{"type":"custom","id":"w1","customType":"x"}\n')
        proxy.refusing.clear()
        again = relayed.open_appender(Durability.always())
        try:
            assert again.commit(U2) == first + len(U1)  # found, acknowledged where it is
            after = again.commit(b'{"type":"custom","id":"u3","customType":"x"}\n')
            again_twice = again.commit(b'{"type":"custom","id":"u4","customType":"x"}\n')
        finally:
            again.close()
    finally:
        holder.close()
        lease.release()
        proxy.close()
    assert stored_ids(url) == ["u1", "u2", "w1", "u3", "u4"]
    assert again_twice > after


@pytest.mark.parametrize("leased", [False, True], ids=["own-connection", "under-the-lease"])
def test_a_replacement_whose_commit_reply_is_lost_says_it_may_have_been_committed(
        pg_url: str, leased: bool) -> None:
    """The connection of a replacement is cut right after its COMMIT went out: the server
    commits it and the client never hears back. The error says it may have been committed
    (not that the session is as it was), and it was."""
    from journal.pg.connect import DatabaseError

    url = new_session(pg_url, f"publish-cut-{leased}")
    proxy = CutProxy(*_server(url), marker=b"COMMIT", refuse=False, settle=0.5)
    direct, relayed = _relayed(url, proxy.port)
    replacement = header_line(direct) + U1
    lease = relayed.lock(5) if leased else None
    try:
        proxy.armed.set()
        with pytest.raises(DatabaseError, match="may have been committed"):
            relayed.publish(replacement, "repair")
    finally:
        if lease is not None:
            lease.release()
        proxy.close()
    assert stored_ids(url) == ["u1"]


# journal.append (all an appender without the lease calls) gets U2 inside an array literal
U2_IN_ARRAY = b'\\"customType\\":\\"cut-here\\"'


@dataclass
class CutWaiting:
    """An unleased appender's U2 cut off while its statement waits in the server for the
    stream row, which `holder` has locked; U1 was acknowledged at `first`."""

    url: str
    proxy: CutProxy
    direct: PostgresStorage
    relayed: PostgresStorage
    holder: psycopg.Connection[Any]
    first: int


@contextmanager
def unleased_cut_waiting(pg_url: str, name: str) -> Iterator[CutWaiting]:
    from journal.errors import WriteFailed

    url = new_session(pg_url, name)
    proxy = CutProxy(*_server(url), marker=U2_IN_ARRAY, refuse=True)
    direct, relayed = _relayed(url, proxy.port)
    holder = _holder(direct.conninfo)
    try:
        unleased = relayed.open_appender(Durability.always())
        first = unleased.commit(U1)
        holder.execute("SELECT 1 FROM journal.streams WHERE session = %s FOR UPDATE",
                       (direct.session,))
        proxy.armed.set()
        with pytest.raises(WriteFailed, match="may have been committed"):
            unleased.commit(U2)  # waits in the server for the row; its client is cut off
        unleased.close()
        _waiting(direct.conninfo, 1)
        proxy.refusing.clear()
        yield CutWaiting(url, proxy, direct, relayed, holder, first)
    finally:
        holder.close()
        proxy.close()


def test_a_resend_looks_for_its_batch_after_the_commits_queued_before_it(pg_url: str) -> None:
    """The first attempt of U2 waits for the stream row, another writer's commit waits behind
    it, and U2 is sent again behind both: it is looked up once they committed (under the
    row's lock), so it is found there, after the other writer's line, not stored twice."""
    with unleased_cut_waiting(pg_url, "resend-queued") as cut:
        other = cut.direct.open_appender(Durability.always())
        again = cut.relayed.open_appender(Durability.always())
        outcomes: list[Any] = []
        try:
            writer = _committing(other, b'{"type":"custom","id":"w1","customType":"x"}\n',
                                 outcomes)
            _waiting(cut.direct.conninfo, 2)
            resent: list[Any] = []
            sender = _committing(again, U2, resent)
            _waiting(cut.direct.conninfo, 3)
            cut.holder.commit()
            writer.join(timeout=30)
            sender.join(timeout=30)
        finally:
            other.close()
            again.close()
    assert stored_ids(cut.url) == ["u1", "u2", "w1"]
    assert resent == [cut.first + len(U1)]


def test_a_resend_refused_while_its_first_attempt_waits_says_it_may_be_committed(
        pg_url: str) -> None:
    """The re-sent U2 is refused (a lock timeout) while its first attempt still waits in the
    server: the error says the batch may have been committed, or may still be (it is, once
    the row is let go), not that nothing of it was stored."""
    from journal.errors import WriteFailed

    with unleased_cut_waiting(pg_url, "resend-refused") as cut:
        with psycopg.connect(cut.direct.conninfo, autocommit=True) as admin:
            admin.execute(psycopg.sql.SQL("ALTER DATABASE {} SET lock_timeout = '300ms'").format(
                psycopg.sql.Identifier(admin.info.dbname)))
        again = cut.relayed.open_appender(Durability.always())
        try:
            with pytest.raises(WriteFailed) as refused:
                again.commit(U2)
        finally:
            again.close()
        cut.holder.commit()
        deadline = time.monotonic() + 10
        while "u2" not in stored_ids(cut.url):
            assert time.monotonic() < deadline, "the first attempt never landed"
            time.sleep(0.02)
    assert "may have been committed, or may still be" in str(refused.value)
    assert "nothing of it was stored" not in str(refused.value)
    assert stored_ids(cut.url) == ["u1", "u2"]


@contextmanager
def unleased_cut_landed(pg_url: str, name: str) -> Iterator[tuple[str, PostgresStorage,
                                                                   PostgresStorage]]:
    """(url, direct, relayed): an unleased appender's U2 committed through a CutProxy (after
    U1), its reply cut off; the proxy lets connections through again."""
    from journal.errors import WriteFailed

    url = new_session(pg_url, name)
    proxy = CutProxy(*_server(url), marker=U2_IN_ARRAY, refuse=True)
    direct, relayed = _relayed(url, proxy.port)
    try:
        unleased = relayed.open_appender(Durability.always())
        unleased.commit(U1)
        proxy.armed.set()
        with pytest.raises(WriteFailed, match=r"the batch \(its first entry: u2\) could not "
                           "be confirmed.*may have been committed.*look for the entry named"):
            unleased.commit(U2)  # commits; its reply never comes
        unleased.close()
        deadline = time.monotonic() + 10
        while "u2" not in stored_ids(url):
            assert time.monotonic() < deadline, "the cut commit never landed"
            time.sleep(0.02)
        proxy.refusing.clear()
        yield url, direct, relayed
    finally:
        proxy.close()


def test_a_new_connection_refused_after_a_lost_attempt_says_the_batch_may_be_committed(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first attempt of U2 is cut off after it went out (it commits); the new connection
    for the retry is refused by the database (a setting, the schema: not unreachable). The
    error says the batch may have been committed, and the commit stays unconfirmed: the
    next commit of U2 finds it rather than storing it twice."""
    from journal.errors import WriteFailed
    from journal.pg import storage as pg_storage
    from journal.pg.connect import DatabaseError

    url = new_session(pg_url, "reconnect-refused")
    proxy = CutProxy(*_server(url), marker=U2_IN_ARRAY, refuse=False, settle=0.5)
    direct, relayed = _relayed(url, proxy.port)
    try:
        unleased = relayed.open_appender(Durability.always())
        try:
            unleased.commit(U1)
            proxy.armed.set()
            with monkeypatch.context() as patch:
                def refused(conninfo: str, **settings: str) -> Any:
                    raise DatabaseError("cannot make the connection's settings: permission "
                                        "denied to set parameter")

                patch.setattr(pg_storage, "connect", refused)
                with pytest.raises(WriteFailed, match="permission denied.*its first attempt "
                                   "lost its connection, and may have been committed"):
                    unleased.commit(U2)
            assert unleased.commit(U2) > 0  # sent again: found where the cut attempt put it
        finally:
            unleased.close()
    finally:
        proxy.close()
    assert stored_ids(url) == ["u1", "u2"]


def test_a_resend_of_a_longer_batch_is_refused_not_acknowledged_by_its_first_line(
        pg_url: str) -> None:
    """The batch sent after U2's lost reply starts with U2 and holds one more entry. It is
    not acknowledged as stored at U2 (its second entry would be lost), nor stored with U2 a
    second time: it is another batch than the one sent before, refused, naming U2."""
    from journal.errors import WriteFailed

    with unleased_cut_landed(pg_url, "resend-longer") as (url, _, relayed):
        again = relayed.open_appender(Durability.always())
        try:
            with pytest.raises(WriteFailed, match=r"its first entry \(u2\) is stored already"
                               r".*this commit stored nothing, but an earlier commit to this "
                               "session has no known outcome"):
                again.commit(U2 + b'{"type":"custom","id":"u3","customType":"x"}\n')
            assert again.commit(U2) > 0  # the batch sent before, sent again: found
        finally:
            again.close()
    assert stored_ids(url) == ["u1", "u2"]


def test_a_resend_whose_transaction_the_server_ends_for_idling_is_tried_again(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-send's transaction holds the stream row, so the server ends it when the client
    leaves it idle (here: its lock statement held back longer than the limit). The
    connection is lost with an error that is not psycopg's OperationalError; the commit is
    tried again on a new one all the same, and U2 is found once its first attempt commits."""
    from journal.pg import storage as pg_storage

    monkeypatch.setattr(pg_storage, "RESEND_IDLE_LIMIT", "1s")
    with unleased_cut_waiting(pg_url, "resend-idle") as cut:
        # the same proxy (the same conninfo: the commit of unknown outcome is this one's)
        cut.proxy.marker, cut.proxy.stall = b"FOR UPDATE", 3.0
        again = cut.relayed.open_appender(Durability.always())
        resent: list[Any] = []
        try:
            cut.proxy.armed.set()
            sender = _committing(again, U2, resent)
            _waiting(cut.direct.conninfo, 2)  # the first attempt, and the retry's lock
            assert not cut.proxy.armed.is_set()  # the stall came first
            cut.holder.commit()
            sender.join(timeout=30)
        finally:
            again.close()
    assert resent == [cut.first + len(U1)]
    assert stored_ids(cut.url) == ["u1", "u2"]


def test_a_batch_whose_first_entry_has_no_id_is_sent_once(pg_url: str) -> None:
    """A batch is recognised on a retry by its first entry's id: a batch whose first entry
    has none (a later one has) is not sent a second time after its reply was lost, where
    it would be stored twice."""
    from journal.errors import WriteFailed

    url = new_session(pg_url, "first-without-id")
    proxy = CutProxy(*_server(url), marker=U2_IN_ARRAY, refuse=False)
    direct, relayed = _relayed(url, proxy.port)
    try:
        appender = relayed.open_appender(Durability.always())
        try:
            proxy.armed.set()
            with pytest.raises(WriteFailed, match="may have been committed") as failed:
                appender.commit(b'{"type":"custom","customType":"cut-here"}\n'
                                b'{"type":"custom","id":"k1","customType":"x"}\n')
            assert "read the session before committing it again" in str(failed.value)
            assert "at most once" not in str(failed.value)
        finally:
            appender.close()
        deadline = time.monotonic() + 10
        while "k1" not in stored_ids(url):
            assert time.monotonic() < deadline, "the cut commit never landed"
            time.sleep(0.02)
    finally:
        proxy.close()
    assert stored_ids(url) == [None, "k1"]


def test_a_sealed_session_says_so_after_a_commit_of_unknown_outcome(pg_url: str) -> None:
    """After U2's lost reply the session is rotated: a commit is refused as sealed, naming
    the successor (the reason to write elsewhere), and saying that the earlier commit has no
    known outcome: U2 sent again must not be written to the successor blindly (it is in the
    sealed session, and in the successor if the rotation kept it)."""
    from test_pg_rotation import fill

    from journal import SessionSealed
    from journal.pg.rotation import rotate_database

    with unleased_cut_landed(pg_url, "sealed-after-cut") as (url, _, relayed):
        with Session.open(url) as session:
            fill(session)
        result = rotate_database(url)
        assert result.rotated
        again = relayed.open_appender(Durability.always())
        try:
            with pytest.raises(SessionSealed, match="continues in"):
                again.commit(b'{"type":"custom","id":"late","customType":"x"}\n')
            with pytest.raises(SessionSealed, match="an earlier commit to this session has "
                               "no known outcome: if this batch is that one, sent again, it "
                               "may be in this session already") as sealed:
                again.commit(U2)
        finally:
            again.close()
        assert sealed.value.successor == session_url(
            relayed.conninfo, str(result.successor_id))


def test_an_empty_commit_after_a_lost_reply_leaves_the_batch_to_be_found(pg_url: str) -> None:
    """An empty commit after U2's lost reply is no error, and says nothing of U2: U2 sent
    again after another writer's line is still found, not stored twice."""
    with unleased_cut_landed(pg_url, "resend-after-empty") as (url, direct, relayed):
        other = direct.open_appender(Durability.always())
        again = relayed.open_appender(Durability.always())
        try:
            other.commit(b'{"type":"custom","id":"w1","customType":"x"}\n')
            again.commit(b"")
            again.commit(U2)
        finally:
            other.close()
            again.close()
    assert stored_ids(url) == ["u1", "u2", "w1"]


def test_a_resend_after_a_replacement_finds_its_batch_where_the_replacement_put_it(
        pg_url: str) -> None:
    """An appender's U2 is stored but its reply is lost; a replacement then drops a line
    before it (U2 moves below where the appender's last acknowledged batch ended), and another
    writer appends. U2 sent again by the same appender is found where it is now, not stored a
    second time."""
    from journal.errors import WriteFailed

    url = new_session(pg_url, "resend-replaced")
    proxy = CutProxy(*_server(url), marker=U2_IN_ARRAY, refuse=True)
    direct, relayed = _relayed(url, proxy.port)
    big = b'{"type":"custom","id":"a0","customType":"x","data":"%s"}\n' % (b"y" * 400)
    try:
        unleased = relayed.open_appender(Durability.always())
        unleased.commit(big)
        unleased.commit(U1)
        proxy.armed.set()
        with pytest.raises(WriteFailed, match="may have been committed"):
            unleased.commit(U2)  # commits; its reply never comes
        deadline = time.monotonic() + 10
        while "u2" not in stored_ids(url):
            assert time.monotonic() < deadline, "the cut commit never landed"
            time.sleep(0.02)
        proxy.refusing.clear()
        header = header_line(direct)
        direct.publish(header + U1 + U2, "repair")
        other = direct.open_appender(Durability.always())
        try:
            other.commit(b'{"type":"custom","id":"w1","customType":"x"}\n')
        finally:
            other.close()
        try:
            at = unleased.commit(U2)
        finally:
            unleased.close()
    finally:
        proxy.close()
    assert stored_ids(url) == ["u1", "u2", "w1"]
    assert at == len(header) + len(U1)


def test_a_flush_failing_after_a_commit_does_not_fail_the_commit(
        pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Under `batch:2`, the flush after the second commit loses its connection and no new one
    can be made. The commit is made, and a database cannot take it back as a file's is cut
    back: it is acknowledged (a caller told it failed would not know of its entry, or would
    store it again), the failed flush is logged, and the next flush is made again."""
    import logging

    url = new_session(pg_url, "flush-cut")
    proxy = CutProxy(*_server(url), marker=b"pg_logical_emit_message", refuse=True)
    direct, relayed = _relayed(url, proxy.port)
    try:
        appender = relayed.open_appender(Durability.batch(2, 60_000))
        try:
            first = appender.commit(U1)
            proxy.armed.set()
            with caplog.at_level(logging.WARNING, logger="journal"):
                at = appender.commit(b'{"type":"custom","id":"u3","customType":"x"}\n')
            proxy.refusing.clear()
            appender.sync()  # the flush that failed, made again
        finally:
            proxy.refusing.clear()
            appender.close()
    finally:
        proxy.close()
    assert at == first + len(U1)
    assert stored_ids(url) == ["u1", "u3"]
    said = [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "journal.pg.storage"]
    assert len(said) == 1 and "sync failed" in said[0], said
    assert "the commit it followed is stored" in said[0]


def test_a_retry_refused_by_a_seal_says_its_first_attempt_may_be_there(pg_url: str) -> None:
    """U2's first attempt waits for the stream row and its connection is cut; the same
    commit's retry waits behind it, and the transaction holding the row seals the session
    (as a rotation does). The retry is refused as sealed, naming the successor, and saying
    that the first attempt may be in the session: not that committing it again stores it
    once."""
    from journal import SessionSealed

    url = new_session(pg_url, "retry-sealed")
    proxy = CutProxy(*_server(url), marker=U2_IN_ARRAY, refuse=False)
    direct, relayed = _relayed(url, proxy.port)
    holder = _holder(direct.conninfo)
    outcome: list[Any] = []
    try:
        unleased = relayed.open_appender(Durability.always())
        try:
            unleased.commit(U1)
            holder.execute("SELECT 1 FROM journal.streams WHERE session = %s FOR UPDATE",
                           (direct.session,))
            proxy.armed.set()
            sender = _committing(unleased, U2, outcome, SessionSealed)
            _waiting(direct.conninfo, 2)  # the first attempt, and the retry's lock
            holder.execute("UPDATE journal.streams SET successor = 'next' WHERE session = %s",
                           (direct.session,))
            holder.commit()
            sender.join(timeout=30)
        finally:
            unleased.close()
    finally:
        holder.close()
        proxy.close()
    assert len(outcome) == 1 and isinstance(outcome[0], SessionSealed), outcome
    assert outcome[0].successor == session_url(relayed.conninfo, "next")
    assert "an earlier attempt of this batch lost its connection: it may be in this session" \
        in str(outcome[0])
    assert stored_ids(url) == ["u1"]


def test_an_empty_commit_whose_reply_is_lost_says_nothing_can_be_stored(pg_url: str) -> None:
    from journal import SessionSealed
    from journal.errors import WriteFailed

    url = new_session(pg_url, "empty-cut")
    proxy = CutProxy(*_server(url), marker=b"journal.append", refuse=True)
    try:
        appender = _relayed(url, proxy.port)[1].open_appender(Durability.always())
        try:
            proxy.armed.set()
            with pytest.raises(WriteFailed, match="it held no entries: nothing of it can have "
                               "been stored"):
                appender.commit(b"")
            proxy.refusing.clear()
            # and it leaves no unknown outcome behind: a refusal says nothing of one
            with psycopg.connect(_relayed(url, proxy.port)[0].conninfo, autocommit=True) as db:
                db.execute("UPDATE journal.streams SET successor = 'next' WHERE session = %s",
                           ("empty-cut",))
            with pytest.raises(SessionSealed) as sealed:
                appender.commit(U1)
            assert "no known outcome" not in str(sealed.value)
        finally:
            proxy.refusing.clear()
            appender.close()
    finally:
        proxy.close()


def test_a_commit_that_never_reached_the_database_says_nothing_was_sent(pg_url: str) -> None:
    """The appender's connection is lost between commits and no new one can be made: the
    commit's attempts send nothing, and it says so (not that the batch may have been
    committed)."""
    from journal.errors import WriteFailed

    url = new_session(pg_url, "unreached")
    proxy = CutProxy(*_server(url), marker=b"SHOW", refuse=True)
    try:
        appender = _relayed(url, proxy.port)[1].open_appender(Durability.always())
        try:
            appender.commit(U1)
            proxy.armed.set()
            with pytest.raises(JournalError, match="cannot connect"):
                appender.setting("synchronous_commit")  # its connection cut; none again
            with pytest.raises(WriteFailed, match="nothing of it was sent") as failed:
                appender.commit(U2)
            assert "may have been committed" not in str(failed.value)
            proxy.refusing.clear()
            appender.commit(b'{"type":"custom","id":"u3","customType":"x"}\n')
        finally:
            proxy.refusing.clear()
            appender.close()
    finally:
        proxy.close()
    assert stored_ids(url) == ["u1", "u3"]


def test_a_lease_connection_found_lost_before_a_commit_is_sent_says_nothing_was_sent(
        pg_url: str) -> None:
    """The lease's connection dies unnoticed before a new appender's first commit, and no new
    connection can be made: reading the end finds it lost before anything of the batch
    went, so the commit says nothing of it was sent (not that it may have been committed).
    (An earlier appender of the lease committed first, so the new one has no setting to make
    on the connection before it reads the end.)"""
    from journal.errors import WriteFailed

    url = new_session(pg_url, "lost-before-sent")
    proxy = CutProxy(*_server(url), marker=b"never sent")
    direct, relayed = _relayed(url, proxy.port)
    lease = relayed.lock(5)
    try:
        earlier = relayed.open_appender(Durability.always())
        earlier.commit(U1)
        earlier.close()
        appender = relayed.open_appender(Durability.always())
        try:
            proxy.refusing.set()
            with psycopg.connect(direct.conninfo, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)",
                              (lease.conn.info.backend_pid,))
            with pytest.raises(WriteFailed, match="nothing of it was sent") as failed:
                appender.commit(U2)
            assert "may have been committed" not in str(failed.value)
        finally:
            proxy.refusing.clear()
            appender.close()
    finally:
        lease.release()
        proxy.close()
    assert stored_ids(url) == ["u1"]


def test_a_leased_writer_after_a_lost_reply_and_a_rotation_is_told_to_look_first(
        pg_url: str) -> None:
    """A writer holding the lease loses U2's reply and cannot reconnect; meanwhile another
    writer takes the session and rotates it. The writer's next commit, U2 sent again, is
    refused (the lease moved on): the error names the successor and says U2 may be in the
    session already, and in the successor if the rotation kept it."""
    from test_pg_rotation import fill

    from journal.errors import WriteFailed
    from journal.pg.rotation import rotate_database

    url = new_session(pg_url, "leased-sealed")
    proxy = CutProxy(*_server(url), marker=b'"customType":"cut-here"', refuse=True)
    direct, relayed = _relayed(url, proxy.port)
    lease = relayed.lock(5)
    try:
        appender = relayed.open_appender(Durability.always())
        try:
            appender.commit(U1)
            proxy.armed.set()
            with pytest.raises(WriteFailed, match="may have been committed"):
                appender.commit(U2)
            with Session.open(url, lock_timeout=20) as session:
                fill(session)
            assert rotate_database(url).rotated
            proxy.refusing.clear()
            with pytest.raises(LeaseLost) as lost:
                appender.commit(U2)
        finally:
            appender.close()
    finally:
        lease.release()
        proxy.close()
    said = str(lost.value)
    assert "sealed by a rotation and continues in" in said
    assert "it may be in this session already, and in its successor if the rotation kept " \
        "it; look there before writing it again" in said


def test_a_flush_after_a_commit_that_finds_the_lease_taken_does_not_fail_the_commit(
        pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Under `batch:2` with the lease, the flush after the second commit loses the lease's
    connection, and the lease cannot be had back (another writer took the session over,
    injected here): the commit, which was made, is acknowledged (not refused with LeaseLost,
    'nothing was appended'), and the failed flush is logged with its reason."""
    import logging

    from journal.pg.lease import Lease

    url = new_session(pg_url, "flush-lease-lost")
    proxy = CutProxy(*_server(url), marker=b"pg_logical_emit_message", refuse=False)
    direct, relayed = _relayed(url, proxy.port)
    lease = relayed.lock(5)
    try:
        appender = relayed.open_appender(Durability.batch(2, 60_000))
        try:
            first = appender.commit(U1)

            def taken(self: Lease, wait: float) -> bool:
                raise LeaseLost(self.locator, self.epoch, "the session changed hands")

            monkeypatch.setattr(Lease, "renew", taken)
            proxy.armed.set()
            with caplog.at_level(logging.WARNING, logger="journal"):
                at = appender.commit(b'{"type":"custom","id":"u3","customType":"x"}\n')
            monkeypatch.undo()
        finally:
            appender.close()
    finally:
        lease.release()
        proxy.close()
    assert at == first + len(U1)
    assert stored_ids(url) == ["u1", "u3"]
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("sync failed: the lease is lost (the session changed hands)" in m
               for m in said), said


def test_a_retry_refused_after_a_lost_connection_leaves_the_commit_unconfirmed(
        pg_url: str) -> None:
    """The first attempt is cut off while it waits in the server; the appender's retry is
    refused (cancelled) while it waits too. The commit may still happen: WriteFailed says
    so, and the entry sent again is found, not stored twice."""
    from journal.errors import WriteFailed

    errors: list[Any] = []
    with row_held_and_cut_armed(pg_url, "refused-retry", refuse=False) as held:
        trying = _committing(held.appender, U2, errors, WriteFailed)
        [retry] = [pid for pid, query in _waiting(held.direct.conninfo, 2)
                   if query.startswith("SELECT journal.append")]
        with psycopg.connect(held.direct.conninfo, autocommit=True) as admin:
            admin.execute("SELECT pg_cancel_backend(%s)", (retry,))
        trying.join(timeout=30)
        assert len(errors) == 1 and "may have been committed" in str(errors[0])
        resent = _resend_behind_it(held.appender, held.direct.conninfo, held.holder)
        held.appender.close()
    assert stored_ids(held.url) == ["u1", "u2"]
    assert resent == [held.first + len(U1)]


def test_an_appender_opened_after_its_lease_connection_broke_is_still_fenced(
        pg_url: str) -> None:
    """The lease's connection dies and another writer takes the session over before the old
    writer opens an appender: that appender cannot have the lease back, and its commits are
    refused by the epoch."""
    url = new_session(pg_url, "broken-lease")
    first = as_storage(url)
    assert isinstance(first, PostgresStorage)
    lease = first.lock(5)
    with psycopg.connect(first.conninfo, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(holder_backend) FROM journal.streams "
                      "WHERE session = 'broken-lease'")
    with pytest.raises(psycopg.OperationalError):
        lease.conn.execute("SELECT 1")  # the writer finds out its lease connection is gone
    assert not lease.held
    try:
        with Session.open(url, lock_timeout=10) as taker:  # another writer takes over
            appender = first.open_appender()
            try:
                taker.append_message({"role": "user", "content": "taker", "timestamp": 1})
                with pytest.raises(LeaseLost):
                    appender.commit(b'{"type":"custom","id":"c1","customType":"x"}\n')
            finally:
                appender.close()
    finally:
        lease.release()
    assert texts(url) == ["taker"]


def test_a_writer_whose_lease_connection_died_takes_the_lease_back_if_nobody_took_it(
        pg_url: str) -> None:
    """The lease's connection is terminated and nobody takes the session meanwhile: the
    writer's next commit takes the lease again (the advisory lock and the same epoch, on a
    new connection), goes on at the end, and another writer again waits for it and times out
    naming it."""
    from journal.errors import LockTimeout

    url = new_session(pg_url, "renewed")
    storage = PostgresStorage.from_url(url)
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    try:
        first = appender.commit(U1)
        epoch = lease.epoch
        with psycopg.connect(storage.conninfo, autocommit=True) as admin:
            row = admin.execute("SELECT pg_terminate_backend(holder_backend), holder_backend "
                                "FROM journal.streams WHERE session = 'renewed'").fetchone()
            assert row is not None and row[0] is True
            old_backend = row[1]
        offset = appender.commit(U2)  # the lost connection is found, the lease taken again
        assert offset == first + len(U1)
        assert lease.held and lease.epoch == epoch
        assert lease.conn.info.backend_pid != old_backend
        holder = storage.holder()
        assert holder is not None and holder["pid"] == os.getpid()
        with pytest.raises(LockTimeout):
            PostgresStorage.from_url(url).lock(0.3)
        appender.commit(b'{"type":"custom","id":"u3","customType":"x"}\n')
    finally:
        appender.close()
        lease.release()
    assert stored_ids(url) == ["u1", "u2", "u3"]


class Interrupted(Exception):
    """What the test's signal handler raises (as SIGINT raises KeyboardInterrupt)."""


@contextmanager
def interruptible() -> Iterator[Callable[[], None]]:
    """While inside, SIGUSR1 raises Interrupted in this thread; yields what sends it here
    (callable from any thread)."""
    here = threading.get_ident()

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        yield lambda: signal.pthread_kill(here, signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)


@dataclass
class Held:
    """A session whose appender committed U1 (at `first`), and a transaction (`holder`) that
    holds up every commit (`hold_lines`): the appender's next waits until `holder` commits."""

    url: str
    storage: PostgresStorage
    appender: Any
    first: int
    holder: psycopg.Connection[Any]


@contextmanager
def row_held(url: str, durability: Durability | None = None) -> Iterator[Held]:
    storage = PostgresStorage.from_url(url)
    lease = storage.lock(5)
    appender = storage.open_appender(durability or Durability.always())
    holder = _holder(storage.conninfo)
    try:
        first = appender.commit(U1)
        hold_lines(holder)
        yield Held(url, storage, appender, first, holder)
    finally:
        holder.close()  # first: nothing may be left waiting for the row it holds
        appender.close()
        lease.release()


def interrupted_while_waiting(held: Held, data: bytes) -> None:
    """Commit `data` on `held`'s appender and interrupt it (a signal) once it waits in the
    server; the interruption is raised as it would be to the caller."""
    with interruptible() as interrupt:
        conninfo = held.storage.conninfo
        threading.Thread(target=lambda: (_waiting(conninfo, 1), interrupt()),
                         daemon=True).start()
        with pytest.raises(Interrupted):
            held.appender.commit(data)


def test_a_commit_interrupted_while_it_waits_is_cancelled_unconfirmed_and_stored_once(
        pg_url: str) -> None:
    """A signal interrupts a one-entry commit waiting in the server: its statement is
    cancelled on the server (it does not commit behind the caller's back), and the commit
    counts as unconfirmed: the same entry sent again is stored once."""
    url = new_session(pg_url, "interrupted")
    with row_held(url) as held:
        interrupted_while_waiting(held, U2)
        conninfo = held.storage.conninfo
        with psycopg.connect(conninfo, autocommit=True) as admin:
            waiting = admin.execute("SELECT count(*) FROM pg_stat_activity "
                                    "WHERE wait_event_type = 'Lock'").fetchone()
        held.holder.commit()
        assert waiting == (0,) and stored_ids(url) == ["u1"]  # cancelled, not left to run
        held.appender.sync()  # the appender goes on, as the settings are read
        assert held.appender.setting("synchronous_commit") == "on"
        again = held.appender.commit(U2)
    assert again == held.first + len(U1)
    assert stored_ids(url) == ["u1", "u2"]


def test_a_one_entry_statement_that_fails_is_reported_as_it_was(pg_url: str) -> None:
    """The one-entry statement failing on a live connection (a lock timeout here, as a
    deployment may set) is reported with the server's reason after that one timeout, not
    tried again another way: nothing is stored, and the appender goes on."""
    from journal.errors import WriteFailed

    url = new_session(pg_url, "timed-out")
    with psycopg.connect(PostgresStorage.from_url(url).conninfo, autocommit=True) as admin:
        database = admin.execute("SELECT current_database()").fetchone()
        assert database is not None
        admin.execute(f'ALTER DATABASE "{database[0]}" SET lock_timeout = 1000')
    with row_held(url) as held:
        released = threading.Event()

        def release() -> None:
            held.holder.commit()
            released.set()

        # the holder lets go at 3 s: long after one timeout, however busy the machine
        threading.Timer(3.0, release).start()
        began = time.monotonic()
        with pytest.raises(WriteFailed, match="lock timeout") as refused:
            held.appender.commit(U2)
        waited = time.monotonic() - began
        # said of a session in a database, not of a file
        assert str(refused.value).endswith("nothing of it was stored, and the session is as "
                                           "it was")
        assert released.wait(30)
        assert held.appender.commit(U2) == held.first + len(U1)
    assert 0.9 < waited < 2.5, waited  # one timeout; a second would take 2 s or outlast it
    assert stored_ids(url) == ["u1", "u2"]


def test_a_prepared_statement_dropped_or_already_there_is_prepared_again(pg_url: str) -> None:
    """psycopg deallocates every prepared statement when it rolls a transaction back, and
    a name may already be taken on a connection: the statement is prepared (again) and
    runs, rather than failing or leaving the fast path for good."""
    from journal.pg.prepared import Prepared

    sql = "SELECT $1::text || '!'"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        statement = Prepared(b"twice", sql, (25,))
        assert statement.first_row(conn, ("a",)) == [b"a!"]
        with pytest.raises(psycopg.errors.DivisionByZero), conn.transaction():
            conn.execute("SELECT 1 / 0")  # rolled back: psycopg drops prepared statements
        assert statement.first_row(conn, ("b",)) == [b"b!"]
        conn.execute("DEALLOCATE ALL")
        assert statement.first_row(conn, ("c",)) == [b"c!"]
        other = Prepared(b"twice", sql, (25,))  # the name is taken on this connection
        assert other.first_row(conn, ("d",)) == [b"d!"]
        with pytest.raises(psycopg.errors.UndefinedFunction):  # a server error, as psycopg's
            Prepared(b"bad", "SELECT nothing_like_this($1)", (25,)).first_row(conn, ("e",))
        assert statement.first_row(conn, ("f",)) == [b"f!"]


def test_an_entry_id_holding_a_nul_is_refused_not_cut_short(pg_url: str) -> None:
    """libpq passes a text parameter up to its first NUL: an id holding one (JSON's \\u0000)
    is not sent that way, and the database refuses it as before, storing nothing."""
    from journal.errors import WriteFailed

    url = new_session(pg_url, "nul")
    storage = PostgresStorage.from_url(url)
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    try:
        with pytest.raises(WriteFailed, match="NUL"):
            appender.commit(b'{"type":"custom","id":"ab\\u0000cd","customType":"x"}\n')
    finally:
        appender.close()
        lease.release()
    assert stored_ids(url) == []


def test_a_retry_fenced_after_a_lost_connection_does_not_say_nothing_was_appended(
        pg_url: str) -> None:
    """The first attempt is cut off while it waits in the server; the epoch moves on
    meanwhile (as a takeover moves it), so the retry, on a connection of its own, is fenced.
    What the first attempt did is not known to the writer: LeaseLost says the batch may have
    been committed, not that nothing was. (Here it was: on the lease's connection the
    one-entry statement is fenced by the advisory lock, not the epoch, and a real takeover
    waits for that lock, which the attempt's server process holds until it ends: the epoch
    moved by hand cannot stop it, and no takeover could have come before it.)"""
    errors: list[Any] = []
    with row_held_and_cut_armed(pg_url, "fenced-retry", refuse=False) as held:
        held.holder.execute("UPDATE journal.streams SET epoch = epoch + 1 "
                            "WHERE session = 'fenced-retry'")  # a takeover's move
        trying = _committing(held.appender, U2, errors)
        _waiting(held.direct.conninfo, 2)  # the first attempt, and the retry behind it
        held.holder.commit()
        trying.join(timeout=30)
        held.appender.close()
    assert len(errors) == 1 and isinstance(errors[0], LeaseLost)
    assert "may have been committed" in str(errors[0])
    assert "nothing was appended" not in str(errors[0])
    assert stored_ids(held.url) == ["u1", "u2"]  # the first attempt, committed


def test_another_thread_waits_for_a_commit_on_the_same_appender(pg_url: str) -> None:
    """The one-entry statement holds psycopg's connection lock as a cursor would: another
    thread's call on the appender waits for the commit, rather than failing with 'another
    command is already in progress' or having the connection closed under it."""
    offsets: list[Any] = []
    with row_held(new_session(pg_url, "threads")) as held:
        committing = _committing(held.appender, U2, offsets)
        _waiting(held.storage.conninfo, 1)
        threading.Timer(0.5, held.holder.commit).start()
        assert held.appender.setting("synchronous_commit") == "on"  # waits for the commit
        committing.join(timeout=30)
    assert offsets == [held.first + len(U1)]
    assert stored_ids(held.url) == ["u1", "u2"]


def test_a_sync_waiting_behind_an_interrupted_commit_is_made(pg_url: str) -> None:
    """Another thread's sync waits for a commit on the appender's connection; the commit is
    interrupted (and cancelled): the sync is made, not failed."""
    synced: list[BaseException | None] = []
    url = new_session(pg_url, "behind")
    with row_held(url, Durability.parse("batch:100:10000")) as held, \
            interruptible() as interrupt:

        def sync() -> None:
            try:
                held.appender.sync()
                synced.append(None)
            except BaseException as e:  # reported below
                synced.append(e)

        syncing = threading.Thread(target=sync, daemon=True)

        def then_interrupt() -> None:
            _waiting(held.storage.conninfo, 1)
            syncing.start()
            time.sleep(0.5)  # the sync waits for the connection the commit holds
            interrupt()

        threading.Thread(target=then_interrupt, daemon=True).start()
        with pytest.raises(Interrupted):
            held.appender.commit(U2)
        syncing.join(timeout=30)
    assert synced == [None]


def test_an_interrupted_commit_keeps_the_lease(pg_url: str) -> None:
    """The interrupted commit was cancelled and ended within the wait: the connection, which
    is the lease's, is kept, so no other writer can take the session meanwhile, and the
    writer's next commit goes on (the entry sent again is stored once)."""
    url = new_session(pg_url, "kept-lease")
    with row_held(url) as held:
        interrupted_while_waiting(held, U2)
        lease_backend = held.storage.holder()
        assert lease_backend is not None and lease_backend["pid"] == os.getpid()
        with pytest.raises(LockTimeout):
            PostgresStorage.from_url(url).lock(0.3)
        held.holder.commit()
        assert held.appender.commit(U2) == held.first + len(U1)
    assert stored_ids(url) == ["u1", "u2"]


def test_the_lease_connection_is_taken_back_or_the_lease_is_lost(pg_url: str) -> None:
    """`Lease.connection()` (what rotation and repair run their transactions on): after the
    lease's connection died, a new one holding the lock, the same epoch; once another writer
    holds the session, LeaseLost, and nothing of the other writer's is changed."""
    url = new_session(pg_url, "connection-back")
    storage = PostgresStorage.from_url(url)
    lease = storage.lock(5)
    try:
        epoch = lease.epoch

        def terminate() -> None:
            with psycopg.connect(storage.conninfo, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(holder_backend) FROM "
                              "journal.streams WHERE session = 'connection-back'")
            with pytest.raises(psycopg.OperationalError):
                lease.conn.execute("SELECT 1")

        terminate()
        conn = lease.connection()
        assert conn is lease.conn and lease.held and lease.epoch == epoch
        assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(LockTimeout):
            PostgresStorage.from_url(url).lock(0.3)
        terminate()
        other = PostgresStorage.from_url(url)
        other_lease = other.lock(5)
        try:
            with pytest.raises(LeaseLost):
                lease.connection(wait=0.2)
            holder = other.holder()
            assert holder is not None and other_lease.held
        finally:
            other_lease.release()
    finally:
        lease.release()
