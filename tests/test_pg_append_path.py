"""The writer's one-entry commit (schema version 5): it goes on the lease's connection at the
end the writer keeps track of and leaves the stream row as it is; readers find the end from
the last line; whatever moved the end under the writer (a line written without the lease, a
replacement, a seal) sends the commit through journal.append, which appends at the true end
or refuses. A database made at version 4 goes on where it was."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import psycopg  # noqa: E402
from pg_server import made_at, statement_counts  # noqa: E402

from journal import Durability, Session, load  # noqa: E402
from journal.errors import LeaseLost, LockTimeout  # noqa: E402
from journal.pg import schema  # noqa: E402
from journal.pg.rotation import rotate_session  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402
from journal.pg.transfer import database_sessions  # noqa: E402
from journal.pg.url import session_url  # noqa: E402

HEADER = b'{"type":"session","version":3,"id":"h","timestamp":"t","cwd":"/"}\n'


def line(entry_id: str, parent: str | None = None) -> bytes:
    """A custom entry's line (a root, or a child of `parent`)."""
    after = b"null" if parent is None else b'"%s"' % parent.encode()
    return (b'{"type":"custom","id":"%s","parentId":%s,"timestamp":"t","customType":"x"}\n'
            % (entry_id.encode(), after))


def row_of(storage: PostgresStorage) -> dict[str, Any]:
    """The stream row's own size, entries and version (xmin: which transaction wrote it)."""
    with psycopg.connect(storage.conninfo, autocommit=True) as conn:
        row = conn.execute("SELECT size, entries, xmin::text FROM journal.streams "
                           "WHERE session = %s", (storage.session,)).fetchone()
    assert row is not None
    return {"size": row[0], "entries": row[1], "xmin": row[2]}


def ids_in_table(storage: PostgresStorage) -> list[tuple[int, int, str | None]]:
    """(position, byte offset, id) of the current generation's lines, in order."""
    with psycopg.connect(storage.conninfo, autocommit=True) as conn:
        return [(int(r[0]), int(r[1]), r[2]) for r in conn.execute(
            "SELECT e.position, e.byte_offset, e.id FROM journal.entries e JOIN "
            "journal.streams s ON s.id = e.stream AND s.generation = e.generation "
            "WHERE s.session = %s ORDER BY e.byte_offset", (storage.session,)).fetchall()]


def contiguous(rows: list[tuple[int, int, str | None]], lengths: dict[str | None, int]
               ) -> bool:
    """Positions 0, 1, 2... and each line starting where the one before ends."""
    at = 0
    for position, (pos, offset, entry_id) in enumerate(rows):
        if pos != position or offset != at:
            return False
        at += lengths[entry_id]
    return True


def compacted(pg_url: str, name: str) -> str:
    """The URL of a new session with a compaction and two messages after it: one that a
    rotation would start a shorter successor of."""
    url = session_url(pg_url, name)
    with Session.create(url, cwd="/") as session:
        kept = ""
        for i in range(4):
            kept = session.append_message({"role": "user", "content": f"m{i}" * 200,
                                           "timestamp": 1})
        session.append_compaction("summary", kept, tokens_before=10)
        for i in range(2):
            session.append_message({"role": "user", "content": f"n{i}", "timestamp": 1})
    return url


def fast_commits(url: str) -> tuple[int, int]:
    """How often the one-entry statement (schema.APPEND_ONE) ran to its end in `url`'s
    database, and how many lines it stored: a run that stored none is one whose check
    refused it (the writer then went through journal.append); one that failed (a unique
    violation) is not counted."""
    return statement_counts(url, "INSERT INTO journal.entries %")


def created(pg_url: str, name: str) -> PostgresStorage:
    storage = PostgresStorage(pg_url, name)
    storage.create(HEADER)
    return storage


def test_one_entry_commits_leave_the_stream_row_and_readers_find_the_end(
        pg_url: str) -> None:
    """Fifty one-entry commits in well under a second write the stream row once (the first
    sets its size, then at most once a second): each is an insert only. Every reader still
    sees them all (size, mark, load, the database listing), and closing sets the row."""
    storage = created(pg_url, "row-kept")
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    try:
        appender.commit(line("a0000000"))
        before = row_of(storage)
        for i in range(1, 51):
            appender.commit(line(f"a{i:07d}"))
        after = row_of(storage)
        end = len(HEADER) + 51 * len(line("a0000000"))
        assert after == before  # not written by the fifty commits
        assert before["size"] < end
        assert appender.size() == end
        assert storage.size() == end
        mark = storage.mark()
        assert mark is not None and mark.size == end
        assert len(load(session_url(pg_url, "row-kept")).entries) == 51
        [listed] = [r for r in database_sessions(pg_url) if r["session"] == "row-kept"]
        assert (listed["size"], listed["entries"]) == (end, 51)  # entries: not the header
    finally:
        appender.close()
        lease.release()
    assert row_of(storage)["size"] == end and row_of(storage)["entries"] == 52


def test_a_line_written_without_the_lease_sends_the_writer_to_the_true_end(
        pg_url: str) -> None:
    """An appender without the lease appends between two of the writer's one-entry commits,
    at the offset the writer expects to write at: the writer's next commit is not lost and
    does not overwrite, it goes after that line; positions and offsets stay contiguous. The
    writer's other commits take the one-entry statement, before and after."""
    storage = created(pg_url, "unleased")
    lease = storage.lock(5)
    writer = storage.open_appender(Durability.always())
    other = PostgresStorage(pg_url, "unleased").open_appender(Durability.always())
    try:
        assert other.epoch is None  # unfenced
        writer.commit(line("w0000001"))
        stranger = other.commit(line("s0000001"))
        at = writer.commit(line("w0000002"))
        assert at == stranger + len(line("s0000001"))
        writer.commit(line("w0000003"))  # and on from there at the end it now knows
    finally:
        other.close()
        writer.close()
        lease.release()
    assert fast_commits(pg_url) == (2, 2)  # w0000001 and w0000003
    rows = ids_in_table(storage)
    assert [r[2] for r in rows] == ["h", "w0000001", "s0000001", "w0000002", "w0000003"]
    assert contiguous(rows, {"h": len(HEADER), **{r[2]: len(line("w0000001"))
                                                  for r in rows[1:]}})


def test_a_replacement_under_the_lease_sends_the_next_commit_to_the_new_generation(
        pg_url: str) -> None:
    """The writer's end is of a generation that a replacement (`publish`, as repair makes
    under the lease) made old: the writer reads the end again (the lease's transaction
    moved `Lease.turns` on), and the next one-entry commit goes to the current generation,
    at its end, never to the old one."""
    storage = created(pg_url, "replaced")
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    try:
        appender.commit(line("r0000001"))
        appender.commit(line("r0000002"))
        storage.publish(HEADER + line("r0000001"), "repair")
        at = appender.commit(line("r0000003"))
    finally:
        appender.close()
        lease.release()
    assert fast_commits(pg_url) == (3, 3)  # the third at the new generation's end
    assert at == len(HEADER) + len(line("r0000001"))
    assert [r[2] for r in ids_in_table(storage)] == ["h", "r0000001", "r0000003"]


def test_a_session_sealed_under_the_writers_own_lease_takes_no_more_lines(
        pg_url: str, tmp_path: Any) -> None:
    """A rotation under the writer's lease seals the session (and moves its epoch on) while
    an appender of it is open: that appender's next commit is refused, saying so, and
    nothing is stored."""
    url = compacted(pg_url, "sealed-open")
    storage = PostgresStorage(pg_url, "sealed-open")
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    successor_lease = None
    try:
        appender.commit(line("e0000001", load(url).entries[-1]["id"]))
        result, successor, successor_lease = rotate_session(storage, lease)
        assert result.rotated and successor is not None
        before = ids_in_table(storage)
        calls, stored = fast_commits(pg_url)
        with pytest.raises(LeaseLost, match="sealed by a rotation"):
            appender.commit(line("e0000002"))
        assert ids_in_table(storage) == before
        # not even sent: after the rotation (a transaction of the lease's) the end read
        # again finds the session sealed, and journal.append says so
        assert fast_commits(pg_url) == (calls, stored)
    finally:
        appender.close()
        if successor_lease is not None:
            successor_lease.release()
        lease.release()


def test_a_database_at_version_4_goes_on_where_its_sessions_end(pg_url: str) -> None:
    """Sessions written at version 4 (whose stream rows kept the size at every commit) are
    brought to version 5: a writer's one-entry and batch commits go on at their ends, with
    contiguous positions and offsets, and the writer role's EXECUTE grant is kept."""
    role = f"writer5_{pg_url.rsplit('/', 1)[1]}"
    call = ("SELECT journal.append(%s, NULL, ARRAY[%s], ARRAY[%s], ARRAY[NULL], "
            "ARRAY['custom'], ARRAY[0]::bigint[], %s, NULL)")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        made_at(conn, 4, role)
        conn.execute("INSERT INTO journal.streams (session, generation) VALUES ('v4', 1)")
        for entry_id in ("h", "o0000001", "o0000002"):
            text = (HEADER if entry_id == "h" else line(entry_id)).decode().rstrip("\n")
            conn.execute(call, ("v4", text, entry_id, len(text) + 1))
        assert schema.current_version(conn) == 4
    storage = PostgresStorage(pg_url, "v4")
    lease = storage.lock(5)  # connects: the migration to version 5 runs here
    appender = storage.open_appender(Durability.always())
    try:
        appender.commit(line("n0000001"))
        appender.commit(line("n0000002") + line("n0000003"))
        appender.commit(line("n0000004"))
    finally:
        appender.close()
        lease.release()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert schema.current_version(conn) == schema.VERSION  # 5, and those after it
        allowed = conn.execute("SELECT has_function_privilege(%s, 'journal.append(text, "
                               "bigint, text[], text[], text[], text[], bigint[], bigint, "
                               "text)', 'EXECUTE')", (role,)).fetchone()
        conn.execute(f'DROP OWNED BY "{role}"')
        conn.execute(f'DROP ROLE "{role}"')
    assert allowed == (True,)
    assert fast_commits(pg_url) == (2, 2)  # the one-entry commits took the statement
    rows = ids_in_table(storage)
    assert [r[2] for r in rows] == ["h", "o0000001", "o0000002", "n0000001", "n0000002",
                                    "n0000003", "n0000004"]
    assert contiguous(rows, {"h": len(HEADER), **{r[2]: len(line("o0000001"))
                                                  for r in rows[1:]}})
    assert storage.size() == len(HEADER) + 6 * len(line("o0000001"))


def test_a_replacement_without_the_lease_is_refused_while_a_writer_holds_it(
        pg_url: str) -> None:
    """A replacement (`publish` of a storage without the lease) while a writer holds the
    lease is refused, naming the holder, and changes nothing: the writer's one-entry commits
    go to the generation it knows, which must stay the session's. Once the lease is let go
    it goes through, holding the lease's lock while it does (no writer takes the lease
    meanwhile)."""
    storage = created(pg_url, "during-publish")
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    other = PostgresStorage(pg_url, "during-publish")
    try:
        appender.commit(line("p0000001"))
        generation = storage.current_generation()
        with pytest.raises(LockTimeout, match=f"pid {os.getpid()}"):
            other.publish(HEADER + line("p0000001"), "repair")
        assert storage.current_generation() == generation
        at = appender.commit(line("p0000002"))
    finally:
        appender.close()
        lease.release()
    assert at == len(HEADER) + len(line("p0000001"))
    assert [r[2] for r in ids_in_table(storage)] == ["h", "p0000001", "p0000002"]
    assert fast_commits(pg_url) == (2, 2)

    refused: list[BaseException] = []

    def meanwhile() -> None:
        with pytest.raises(LockTimeout) as taken:
            PostgresStorage(pg_url, "during-publish").lock(0)
        refused.append(taken.value)

    other.publish(HEADER + line("p0000001"), "repair", before_swap=meanwhile)
    assert len(refused) == 1
    assert [r[2] for r in ids_in_table(storage)] == ["h", "p0000001"]
    storage.lock(0).release()  # let go with the replacement's transaction


def test_a_replacement_under_the_lease_runs_on_its_connection_and_commits_wait(
        pg_url: str) -> None:
    """`publish` under the storage's lease runs on the lease's connection: a commit from
    another thread meanwhile waits for it (in this process: the server sees no second
    connection of the writer), and is appended to the new generation at its end."""
    import threading

    storage = created(pg_url, "publish-under-lease")
    lease = storage.lock(5)
    backend = lease.conn.info.backend_pid
    appender = storage.open_appender(Durability.always())
    offsets: list[int] = []
    seen: list[int] = []
    try:
        appender.commit(line("q0000001"))
        committing = threading.Thread(
            target=lambda: offsets.append(appender.commit(line("q0000002"))), daemon=True)

        def meanwhile() -> None:
            with psycopg.connect(storage.conninfo, autocommit=True) as admin:
                row = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' "
                    "AND datname = current_database()").fetchone()
                seen.append(row[0] if row is not None else -1)
            committing.start()
            committing.join(timeout=0.5)
            assert committing.is_alive() and offsets == []

        storage.publish(HEADER + line("q0000001"), "repair", before_swap=meanwhile)
        committing.join(timeout=30)
    finally:
        appender.close()
        lease.release()
    assert seen == [backend]
    assert offsets == [len(HEADER) + len(line("q0000001"))]
    assert [r[2] for r in ids_in_table(storage)] == ["h", "q0000001", "q0000002"]


def test_a_release_from_another_thread_waits_for_a_replacement_under_the_lease(
        pg_url: str) -> None:
    """The lease released from another thread while a replacement runs on its connection:
    the release waits for it (it would otherwise run inside the replacement's transaction and
    close the connection under it), then lets the session go."""
    import threading

    storage = created(pg_url, "released-meanwhile")
    lease = storage.lock(5)
    releasing = threading.Thread(target=lease.release, daemon=True)

    def meanwhile() -> None:
        releasing.start()
        releasing.join(timeout=0.5)
        assert releasing.is_alive()

    storage.publish(HEADER + line("x0000001"), "repair", before_swap=meanwhile)
    releasing.join(timeout=30)
    assert not releasing.is_alive() and lease.released
    assert [r[2] for r in ids_in_table(storage)] == ["h", "x0000001"]
    other = storage.lock(0)  # let go: taken at once
    other.release()


def test_appenders_sharing_the_lease_commit_each_with_its_own_durability(
        pg_url: str) -> None:
    """Two appenders of one lease share its connection: each commits with the
    synchronous_commit of its own durability policy, whichever was opened or used last (read
    from the connection itself after each commit)."""
    storage = created(pg_url, "two-policies")
    lease = storage.lock(5)
    always = storage.open_appender(Durability.always())
    never = storage.open_appender(Durability.parse("never"))

    def committed_with() -> str:
        row = lease.conn.execute("SHOW synchronous_commit").fetchone()
        assert row is not None
        return str(row[0])

    try:
        never.commit(line("d0000001"))
        assert committed_with() == "off"
        always.commit(line("d0000002"))
        assert committed_with() == "on"
        never.commit(line("d0000003"))
        assert committed_with() == "off"
        assert always.synchronous_commit == "on" and never.synchronous_commit == "off"
    finally:
        never.close()
        always.close()
        lease.release()
    assert [r[2] for r in ids_in_table(storage)] == ["h", "d0000001", "d0000002", "d0000003"]


def test_an_empty_commit_after_one_entry_returns_the_end(pg_url: str) -> None:
    storage = created(pg_url, "empty")
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    try:
        at = appender.commit(line("z0000001"))
        end = at + len(line("z0000001"))
        assert appender.commit(b"") == end
        assert appender.size() == end
        assert appender.commit(line("z0000002")) == end
    finally:
        appender.close()
        lease.release()


@pytest.mark.parametrize("known", [True, False], ids=["known-lost", "silently-lost"])
def test_a_rotation_after_the_lease_connection_died_takes_the_lease_back(
        pg_url: str, known: bool) -> None:
    """The lease's connection is terminated and nobody takes the session: a rotation under
    that lease takes it back on a new connection and rotates, whether the client has found
    the connection lost already or not (it is found out only by using it)."""
    compacted(pg_url, "rotate-renewed")
    storage = PostgresStorage(pg_url, "rotate-renewed")
    lease = storage.lock(5)
    successor_lease = None
    try:
        with psycopg.connect(storage.conninfo, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(holder_backend) FROM journal.streams "
                          "WHERE session = 'rotate-renewed'")
        if known:
            with pytest.raises(psycopg.OperationalError):
                lease.conn.execute("SELECT 1")
        result, successor, successor_lease = rotate_session(storage, lease)
        assert result.rotated and successor is not None
        assert storage.successor() == successor.locator
    finally:
        if successor_lease is not None:
            successor_lease.release()
        lease.release()


def test_a_commit_waits_while_the_lease_connection_runs_a_transaction(pg_url: str) -> None:
    """A commit from another thread while the lease's connection runs a transaction (a
    rotation's, a repair's) waits for it to end: sent inside it, the commit would be
    acknowledged before it was committed, and gone when that transaction rolls back."""
    import threading
    import time

    storage = created(pg_url, "in-turn")
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    offsets: list[int] = []
    try:
        first = appender.commit(line("t0000001"))
        committing = threading.Thread(
            target=lambda: offsets.append(appender.commit(line("t0000002"))), daemon=True)
        with lease.busy, lease.connection().transaction(force_rollback=True):
            lease.conn.execute("SELECT 1")
            committing.start()
            time.sleep(0.5)
            assert offsets == []  # waiting its turn, not sent inside this transaction
        committing.join(timeout=30)
    finally:
        appender.close()
        lease.release()
    assert offsets == [first + len(line("t0000001"))]
    assert [r[2] for r in ids_in_table(storage)] == ["h", "t0000001", "t0000002"]


def test_one_entry_commits_are_announced_while_the_session_is_followed(pg_url: str) -> None:
    """The writer's one-entry commits look in journal.followers at most every ANNOUNCE_LAG
    seconds, not in each commit: none is announced while nobody follows the session; once a
    follower registers, every commit from the writer's next look on is (within ANNOUNCE_LAG
    of the registration); once it is gone, none is after the look that finds it gone."""
    import time

    from journal.pg.watch import ANNOUNCE_LAG, CHANNEL, parse

    storage = created(pg_url, "announced")
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    listener = psycopg.connect(pg_url, autocommit=True)
    listener.execute(f"LISTEN {CHANNEL}")
    admin = psycopg.connect(pg_url, autocommit=True)
    made: list[tuple[float, int]] = []  # (when, the session's entries after the commit)

    def commit_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            appender.commit(line(f"a{len(made):07d}"))
            made.append((time.monotonic(), len(made) + 2))
            time.sleep(0.01)

    def announced() -> list[int]:
        return [position for note in listener.notifies(timeout=0.5)
                if (position := parse(note.payload)[1]) is not None
                and parse(note.payload)[0] == "announced"]

    started = time.monotonic()
    try:
        commit_for(3 * ANNOUNCE_LAG)
        assert announced() == []
        registered = time.monotonic()
        admin.execute("INSERT INTO journal.followers (session, backend, until) VALUES "
                      "('announced', 1, now() + interval '60 seconds')")
        first = len(made)
        commit_for(3 * ANNOUNCE_LAG)
        heard = announced()
        after = [entries for _, entries in made[first:]]
        assert heard and heard == after[after.index(heard[0]):]  # every one from the first
        when = dict((entries, at) for at, entries in made)
        assert when[heard[0]] - registered < ANNOUNCE_LAG + 0.5  # a slow commit's margin
        admin.execute("DELETE FROM journal.followers WHERE session = 'announced'")
        commit_for(ANNOUNCE_LAG + 0.05)  # the next look finds nobody
        announced()
        commit_for(3 * ANNOUNCE_LAG)
        assert announced() == []
        took = time.monotonic() - started
    finally:
        appender.close()
        lease.release()
        listener.close()
        admin.close()
    assert fast_commits(pg_url)[1] == len(made)  # every commit a one-entry statement
    looked, _ = statement_counts(pg_url, "%INSERT INTO journal.entries%journal.followers%")
    assert 4 <= looked <= took / ANNOUNCE_LAG + 2 and looked < len(made) / 3


def test_a_commit_that_ends_after_the_next_look_was_due_is_announced(pg_url: str) -> None:
    """A one-entry commit sent unannounced (nobody followed at the last look) waits in the
    server (here for the append gate) while a follower registers and reads, counting on the
    writers' looks: it ends once the next look was due, and the writer then looks and
    announces it, rather than leaving the follower asleep until its timeout."""
    import threading
    import time

    from journal.pg.lease import gate_key
    from journal.pg.watch import ANNOUNCE_LAG, CHANNEL, parse

    storage = created(pg_url, "late")
    lease = storage.lock(5)
    appender = storage.open_appender(Durability.always())
    listener = psycopg.connect(pg_url, autocommit=True)
    listener.execute(f"LISTEN {CHANNEL}")
    gate = psycopg.connect(pg_url)
    done: list[int] = []
    try:
        appender.commit(line("l0000001"))  # looks: nobody follows
        gate.execute("SELECT pg_advisory_xact_lock(%s)", (gate_key("late"),))
        committing = threading.Thread(
            target=lambda: done.append(appender.commit(line("l0000002"))), daemon=True)
        committing.start()  # sent unannounced; waits for the gate
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("INSERT INTO journal.followers (session, backend, until) VALUES "
                          "('late', 1, now() + interval '60 seconds')")
        time.sleep(ANNOUNCE_LAG * 2)
        assert done == []
        gate.commit()
        committing.join(timeout=10)
        heard = [parse(note.payload) for note in listener.notifies(timeout=1.0)]
    finally:
        gate.close()
        appender.close()
        lease.release()
        listener.close()
    assert done == [len(HEADER) + len(line("l0000001"))]
    assert heard == [("late", 3)]
