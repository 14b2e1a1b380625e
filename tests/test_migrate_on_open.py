"""Opening a version 1 or 2 file for writing migrates it to version 3, as pi does when it opens
one (issue 13 item 8): under the lock, atomically, one `.bak` of the original, a warning; and
`migrate=False` / `--no-migrate` refuses as before.

The files are generated (see test_legacy_generated.py), and the real pi files are used where
this checkout has them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from corruption import context_of, generated_bytes, nul_line, split_lines
from test_legacy_generated import SEED, SIZE, as_version_1
from third_party import pi_path

from agent.cli import main as agent_main
from journal import UnsupportedVersion, codec, model
from journal.session import Session
from journal.snapshot import load

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "agent" / "scenarios"


@pytest.fixture(scope="module")
def v3(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return generated_bytes(tmp_path_factory.mktemp("gen"), SEED, SIZE)


def as_version_2(data: bytes) -> bytes:
    """A version 3 file written as version 2: the header says 2, and the last user message
    on the active branch has the version 2 role `hookMessage`."""
    header, *entries = (orjson.loads(line) for line in split_lines(data))
    hook = next(e for e in reversed(entries) if e["type"] == "message"
                and e["message"]["role"] == "user")
    hook["message"] = {**hook["message"], "role": "hookMessage", "customType": "ext",
                       "display": True}
    return b"".join(orjson.dumps(o) + b"\n" for o in [{**header, "version": 2}, *entries])


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def legacy(request: pytest.FixtureRequest, v3: bytes, tmp_path: Path) -> Path:
    path = tmp_path / "legacy.jsonl"
    path.write_bytes(as_version_1(v3) if request.param == 1 else as_version_2(v3))
    return path


def listing(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def without_last_line(data: bytes) -> bytes:
    return data[:len(data) - len(split_lines(data)[-1]) - 1]


def assert_migrated(path: Path, original: bytes) -> None:
    """`path` is the migrated `original`: version 3 as pi writes it, every entry kept with the
    ids every reader gives it, the same context, and the original as `.bak`."""
    before = Path(str(path) + ".orig")
    before.write_bytes(original)
    try:
        old_snap, _, old_context = context_of(before)
        new_snap, _, new_context = context_of(path)
    finally:
        before.unlink()
    assert old_snap.version < 3 and new_snap.version == 3
    assert new_snap.diagnostics == []
    assert new_snap.entries == old_snap.entries  # every entry, as the in-memory migration
    assert new_context == old_context
    header, *lines = (orjson.loads(line) for line in split_lines(path.read_bytes()))
    assert header["type"] == "session" and header["version"] == model.CURRENT_VERSION
    assert header["id"] == old_snap.header["id"]  # type: ignore[index]
    for entry in lines:  # every line is a valid version 3 entry with its id and parent
        assert codec.check_entry(entry, model.CURRENT_VERSION) is None
        assert "id" in entry and "parentId" in entry
    assert all(m["role"] != "hookMessage" for m in new_context)
    assert Path(str(path) + ".bak").read_bytes() == original


def test_open_migrates_a_legacy_file_and_appends_to_it(
        legacy: Path, caplog: pytest.LogCaptureFixture) -> None:
    original = legacy.read_bytes()
    with caplog.at_level(logging.WARNING, logger="journal"):
        with Session.open(legacy) as session:
            leaf = session.leaf_id
            new_id = session.append_message({"role": "user", "content": "after", "timestamp": 1})
    assert any("migrated from session format version" in r.getMessage()
               and str(legacy) + ".bak" in r.getMessage() for r in caplog.records)
    # the migrated file, plus the one entry appended on the leaf
    migrated = legacy.read_bytes()
    appended = orjson.loads(split_lines(migrated)[-1])
    assert appended["id"] == new_id and appended["parentId"] == leaf
    legacy.write_bytes(without_last_line(migrated))
    assert_migrated(legacy, original)
    # and it reopens as an ordinary version 3 file (no second migration, no new backup)
    legacy.write_bytes(migrated)
    backup = Path(str(legacy) + ".bak").read_bytes()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="journal"), Session.open(legacy) as again:
        assert again.leaf_id == new_id and again.get_entry(leaf or "") is not None
    assert not any("migrated" in r.getMessage() for r in caplog.records)
    assert legacy.read_bytes() == migrated
    assert Path(str(legacy) + ".bak").read_bytes() == backup


def test_migrate_false_refuses_and_changes_nothing(legacy: Path) -> None:
    before = listing(legacy.parent)
    with pytest.raises(UnsupportedVersion, match="--migrate"):
        Session.open(legacy, migrate=False)
    assert listing(legacy.parent) == before


def test_a_legacy_file_that_needs_repair_is_not_migrated_on_open(v3: bytes,
                                                                tmp_path: Path) -> None:
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(nul_line(as_version_1(v3), 3))
    before = listing(tmp_path)
    with pytest.raises(UnsupportedVersion, match="repair --migrate"):
        Session.open(path)
    assert {k: v for k, v in listing(tmp_path).items() if not k.endswith(".lock")} == before


def test_journal_append_migrates_and_says_so(legacy: Path, tmp_path: Path) -> None:
    original = legacy.read_bytes()
    line = b'{"role":"user","content":"hello","timestamp":1}\n'
    done = subprocess.run([sys.executable, "-m", "journal.cli", "append", str(legacy)],
                          input=line, capture_output=True, cwd=ROOT,
                          env={**os.environ, "HOME": str(tmp_path)}, timeout=60)
    assert done.returncode == 0, done.stderr
    err = done.stderr.decode()
    assert "Traceback" not in err and "Error:" not in err
    assert err.count("migrated from session format version") == 1
    assert str(legacy) + ".bak" in err
    written = legacy.read_bytes()
    last = orjson.loads(split_lines(written)[-1])
    assert last["message"]["content"] == "hello"
    legacy.write_bytes(without_last_line(written))
    assert_migrated(legacy, original)


def test_journal_append_no_migrate_refuses(legacy: Path, tmp_path: Path) -> None:
    before = listing(tmp_path)
    done = subprocess.run([sys.executable, "-m", "journal.cli", "append", "--no-migrate",
                           str(legacy)], input=b'{"role":"user","content":"x","timestamp":1}\n',
                          capture_output=True, cwd=ROOT,
                          env={**os.environ, "HOME": str(tmp_path)}, timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 2
    assert err.count("Error:") == 1 and "Traceback" not in err and "--migrate" in err
    assert listing(tmp_path) == before


def _agent_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> tuple[Path, list[str]]:
    """A session one agent run made, rewritten as version 1."""
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(tmp_path / "default-sessions"))
    monkeypatch.delenv("JOURNAL_AGENT_SESSIONS", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    workspace, sessions = tmp_path / "ws", tmp_path / "sessions"
    workspace.mkdir()
    common = ["--model", f"scripted:{SCENARIOS / 'test_two_part.json'}",
              "--workspace", str(workspace)]
    assert agent_main(["run", "Make a todo list.", *common, "--sessions-dir",
                       str(sessions)]) == 0
    [path] = sorted(sessions.glob("*.jsonl"))
    path.write_bytes(as_version_1(path.read_bytes()))
    capsys.readouterr()
    return path, common


def test_journal_agent_session_migrates_a_legacy_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    path, common = _agent_session(tmp_path, monkeypatch, capsys)
    original = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="journal"):
        code = agent_main(["run", "Add 'call mum'.", "--session", str(path), *common])
    assert code == 0
    assert any("migrated from session format version 1" in r.getMessage()
               for r in caplog.records)
    assert Path(str(path) + ".bak").read_bytes() == original
    snap = load(path)
    assert snap.version == 3 and not snap.diagnostics
    roles = [m["role"] for m in context_of(path)[2]]
    assert roles == ["user", "assistant", "toolResult", "assistant",
                     "user", "assistant", "toolResult", "assistant"]


def test_journal_agent_no_migrate_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, common = _agent_session(tmp_path, monkeypatch, capsys)
    before = listing(tmp_path)
    code = agent_main(["run", "Add 'call mum'.", "--session", str(path), "--no-migrate",
                       *common])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("Error:") == 1 and "Traceback" not in err and "--migrate" in err
    assert listing(tmp_path) == before


KILLER = """
import os, signal, sys
from journal.session import Session

path, when = sys.argv[1], sys.argv[2]
real_rename = os.rename

def rename(src, dst, *args, **kwargs):
    # the publication step of the migration: the temp ('.<name>.<random>.repair.tmp')
    # renamed over the session file
    if str(src).endswith(".repair.tmp"):
        if when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        real_rename(src, dst, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
    return real_rename(src, dst, *args, **kwargs)

os.rename = rename
Session.open(path)
print("not killed")
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_migration_killed_at_publication_leaves_one_whole_file(
        when: str, v3: bytes, tmp_path: Path) -> None:
    path = tmp_path / "legacy.jsonl"
    original = as_version_1(v3)
    path.write_bytes(original)
    done = subprocess.run([sys.executable, "-c", KILLER, str(path), when], cwd=ROOT,
                          capture_output=True, timeout=60,
                          env={**os.environ, "HOME": str(tmp_path),
                               "PYTHONPATH": str(ROOT)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert path.exists()
    if when == "before":
        assert path.read_bytes() == original
        assert any(p.name.endswith(".repair.tmp") for p in tmp_path.iterdir())
    else:
        assert load(path).version == 3
    # reopening works: it migrates (again, if it must), cleans the crash's temp, and appends
    with Session.open(path) as session:
        session.append_message({"role": "user", "content": "after the crash", "timestamp": 1})
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    written = path.read_bytes()
    path.write_bytes(without_last_line(written))
    assert_migrated(path, original)


@pytest.mark.parametrize("name", ["large-session.jsonl", "before-compaction.jsonl",
                                  "all-types.jsonl"])
def test_real_pi_files_migrate_on_open(name: str, tmp_path: Path) -> None:
    source = pi_path(name)
    original = source.read_bytes()
    if load(source).version >= 3:
        pytest.skip(f"{name} is already version 3")
    path = tmp_path / name
    path.write_bytes(original)
    with Session.open(path) as session:
        count = len(session.entries) if session.tree.complete else None
    assert count is None or count == len(load(source).entries)
    assert_migrated(path, original)
