"""Creating, opening and appending: headers, modes, torn tails, versions, the lock."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import orjson
import pytest

from journal import (
    Durability,
    JournalError,
    LockTimeout,
    NotASession,
    Session,
    UnknownEntry,
    UnsupportedVersion,
    load,
    read_quarantine,
)


def test_create_in_directory_uses_pi_name_and_mode_0600(tmp_path):
    with Session.create(tmp_path / "sessions", cwd="/work") as s:
        name = os.path.basename(s.path)
        assert name.endswith(f"_{s.session_id}.jsonl")
        assert s.path.startswith(str(tmp_path / "sessions"))
        mode = stat.S_IMODE(os.stat(s.path).st_mode)
        header = orjson.loads(open(s.path, "rb").readline())
    assert mode == 0o600
    assert header["type"] == "session" and header["version"] == 3 and header["cwd"] == "/work"
    assert name.startswith(header["timestamp"].replace(":", "-").replace(".", "-"))


def test_create_refuses_to_overwrite(tmp_path):
    path = tmp_path / "s.jsonl"
    Session.create(path, cwd="/").close()
    before = path.read_bytes()
    with pytest.raises(JournalError, match="already exists"):
        Session.create(path, cwd="/")
    assert path.read_bytes() == before


def test_append_helpers_return_ids_and_chain_parents(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        a = s.append_message({"role": "user", "content": "x"})
        b, c = s.append_many([
            {"type": "message", "message": {"role": "user", "content": "y"}},
            {"type": "custom", "customType": "journal.test", "data": 1},
        ])
        d = s.append_session_info("  named  ")
        path = s.path
    entries = load(path).entries
    assert [e["id"] for e in entries] == [a, b, c, d]
    assert [e["parentId"] for e in entries] == [None, a, b, c]
    assert entries[3]["name"] == "named"


def test_append_many_refuses_headers_and_bad_entries_without_writing(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        size = os.path.getsize(s.path)
        with pytest.raises(JournalError):
            s.append_many([{"type": "message", "message": {"role": "user"}}, {"type": "session"}])
        with pytest.raises(JournalError):
            s.append_entry({"type": "model_change", "provider": "p"})
        assert os.path.getsize(s.path) == size


def test_open_quarantines_torn_tail_before_appending(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_message({"role": "user", "content": "kept"})
        path = s.path
    good = open(path, "rb").read()
    fragment = b'{"type":"message","id":"deadbeef","parentId":null,"mess'
    with open(path, "ab") as f:
        f.write(fragment)
    with Session.open(path) as s:
        assert [q.data for q in s.recovered] == [fragment]
        assert os.path.getsize(path) == len(good)
        new = s.append_message({"role": "user", "content": "next"})
    snap = load(path)
    assert snap.diagnostics == []
    assert snap.entries[-1]["id"] == new
    (record,) = list(read_quarantine(path + ".quarantine"))
    assert record["data"] == fragment and record["offset"] == len(good)
    assert record["reason"] == "torn_tail"


def test_open_errors_are_clear(tmp_path):
    with pytest.raises(NotASession, match="no such file"):
        Session.open(tmp_path / "missing.jsonl")
    with pytest.raises(NotASession, match="directory"):
        Session.open(tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(NotASession, match="empty"):
        Session.open(empty)
    headless = tmp_path / "headless.jsonl"
    headless.write_bytes(b'{"type":"message","id":"a","parentId":null,"message":{}}\n')
    with pytest.raises(NotASession, match="journal repair"):
        Session.open(headless)
    assert headless.read_bytes().startswith(b'{"type":"message"')


def test_legacy_versions_are_not_appended_to_without_migrate(pi_fixture):
    legacy = pi_fixture("large-session.jsonl")
    before = legacy.read_bytes()
    with pytest.raises(UnsupportedVersion, match="--migrate"):
        Session.open(legacy, migrate=False)
    assert legacy.read_bytes() == before


def test_future_versions_are_not_appended_to(tmp_path):
    """Apart from the test above, so that it runs without the real pi files."""
    future = tmp_path / "future.jsonl"
    future.write_bytes(b'{"type":"session","version":9,"id":"x","timestamp":"t","cwd":"/"}\n')
    with pytest.raises(UnsupportedVersion, match="newer"):
        Session.open(future)


def test_second_writer_times_out_naming_the_holder(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        with pytest.raises(LockTimeout) as info:
            Session.open(s.path, lock_timeout=0.2)
        assert info.value.holder["pid"] == os.getpid()
        assert f"pid {os.getpid()}" in str(info.value)
        path = s.path
    Session.open(path, lock_timeout=0.2).close()


def test_durability_policies_parse_and_describe():
    assert Durability.parse("always") == Durability.always()
    assert Durability.parse("never").describe() == "never"
    assert Durability.parse("batch:10:50") == Durability.batch(10, 50.0)
    with pytest.raises(ValueError):
        Durability.parse("sometimes")
    untimed = Durability.batch(5, None)  # every 5 commits, no time bound
    assert untimed.describe() == "batch:5:inf"
    assert Durability.parse(untimed.describe()).describe() == "batch:5:inf"


def test_a_batch_policy_without_a_time_bound_syncs_at_close(tmp_path, monkeypatch):
    """Closing with commits pending asks the policy's description; one without an interval
    could not describe itself and the close raised."""
    calls = []
    real = os.fdatasync
    monkeypatch.setattr("journal.log.os.fdatasync", lambda fd: (calls.append(fd), real(fd)))
    with Session.create(tmp_path / "s.jsonl", cwd="/",
                        durability=Durability.batch(5, None)) as s:
        for i in range(7):
            s.append_message({"role": "user", "content": str(i)})
        assert len(calls) == 1
    assert len(calls) == 2, "close syncs what is pending"


def test_batch_policy_syncs_every_n(tmp_path, monkeypatch):
    calls = []
    real = os.fdatasync
    monkeypatch.setattr("journal.log.os.fdatasync", lambda fd: (calls.append(fd), real(fd)))
    with Session.create(tmp_path / "s.jsonl", cwd="/",
                        durability=Durability.batch(3, 60_000)) as s:
        for i in range(7):
            s.append_message({"role": "user", "content": str(i)})
        assert len(calls) == 2
    assert len(calls) == 3, "close syncs what is pending"
    calls.clear()
    with Session.open(s.path, durability=Durability.never()) as s2:
        s2.append_message({"role": "user", "content": "x"})
    assert calls == []


def test_new_ids_avoid_ids_a_fast_resume_did_not_read(tmp_path, monkeypatch):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_model_change("anthropic", "m")
        early = s.append_message({"role": "user", "content": "early"})
        for i in range(20):
            s.append_message({"role": "user", "content": f"m{i}"})
        kept = s.append_message({"role": "user", "content": "kept"})
        s.append_compaction("summary", kept, 100)
        path = s.path
    with Session.open(path) as s:
        assert not s.tree.complete and early not in s.tree.ids
        assert s._older_ids is not None and s._older_ids.wait(10)
        draws = iter([int(early, 16), 0xABCDEF12])
        monkeypatch.setattr("journal.model.random.getrandbits", lambda n: next(draws))
        new = s.append_message({"role": "user", "content": "late"})
    assert new == "abcdef12", "the id of an entry the resume skipped must not be reused"


@pytest.mark.parametrize("append", [
    lambda s: s.append_message("a plain string"),
    lambda s: s.append_message([1, 2]),
    lambda s: s.append_entry({"type": "message"}),
    lambda s: s.append_entry({"type": "custom"}),
    lambda s: s.append_entry({"type": "model_change", "provider": "p"}),
])
def test_an_entry_the_reader_would_set_aside_is_not_appended(tmp_path, append):
    """What the store's own reader would drop (a message that is no object, a field its
    type requires missing) was appended, its id returned, and then missing from every
    reading: now JournalError, nothing appended."""
    with Session.create(str(tmp_path), cwd="/") as session:
        kept = session.append_message({"role": "user", "content": "hello", "timestamp": 0})
        before = Path(session.path).read_bytes()
        with pytest.raises(JournalError, match="not appended: .* would not read back"):
            append(session)
        assert Path(session.path).read_bytes() == before
        assert session.leaf_id == kept
        assert [e["id"] for e in load(session.path).entries] == [kept]


def test_a_compaction_keeping_from_an_unknown_entry_is_refused(tmp_path):
    """Its context would have been the summary alone (the kept messages silently gone)."""
    with Session.create(str(tmp_path), cwd="/") as session:
        session.append_message({"role": "user", "content": "a", "timestamp": 0})
        with pytest.raises(UnknownEntry):
            session.append_compaction("sum", "deadbeef", tokens_before=1)
        assert [m["role"] for m in session.context().messages] == ["user"]


@pytest.mark.parametrize("make", [
    lambda: Durability(every=-1),
    lambda: Durability.batch(0, 0),
    lambda: Durability.batch(5, float("nan")),
    lambda: Durability(every=1.5),  # type: ignore[arg-type]
])
def test_a_durability_policy_that_means_nothing_is_refused(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("timeout", [-1, float("nan"), "10"])
def test_a_lock_timeout_that_is_no_number_of_seconds_is_refused(tmp_path, timeout):
    with Session.create(str(tmp_path), cwd="/") as session:
        path = session.path
    with pytest.raises(ValueError, match="a lock timeout is a number of seconds"):
        Session.open(path, lock_timeout=timeout)


@pytest.mark.parametrize("target", [42, None, b"bytes"])
def test_a_session_named_by_something_else_is_a_type_error(target):
    """load(42) and Session.open(None) ended in AttributeError ('locator')."""
    with pytest.raises(TypeError, match="a session is named by a path"):
        load(target)


def test_a_field_of_the_wrong_type_is_appended_and_kept_as_pi_keeps_it(tmp_path):
    """Readers keep an entry whose field has the wrong type (and name the field), as pi does:
    appending one (a copy of a branch, say) is not refused."""
    with Session.create(str(tmp_path), cwd="/") as session:
        kept = session.append_message({"role": "user", "content": "a", "timestamp": 0})
        compaction = session.append_entry({"type": "compaction", "summary": "s",
                                           "firstKeptEntryId": kept, "tokensBefore": "12000"})
    snap = load(session.path)
    assert [e["id"] for e in snap.entries] == [kept, compaction]
    assert snap.field_issues
