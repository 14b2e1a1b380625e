"""The read commands as people run them: from the tail, through rotations, on archives and on
files that are no session; and never a lock file."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from corruption import gen_session_module
from test_cli_write_input import as_nobody
from test_rotate import build_session

from journal import Session, load, rotate
from journal.cli import main, tail_main
from journal.context import build_context
from journal.tree import Tree

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv: str, entry=main) -> tuple[int, str, str]:
    code = entry(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def listing(folder: Path) -> dict[str, str]:
    """Every file under `folder` with a hash of its bytes (what a command must not change)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[str(path.relative_to(folder))] = "dir"
    return found


def one_error(err: str) -> None:
    lines = err.splitlines()
    assert sum(line.startswith("Error: ") for line in lines) == 1, err
    assert "Traceback" not in err


def rchar() -> int:
    """Bytes this process has read with read(2) and its kin, from any file."""
    with open("/proc/self/io", "rb") as f:
        for line in f:
            if line.startswith(b"rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def full_context(path: Path):
    snap = load(path)
    tree = Tree(snap.entries)
    return build_context(tree, tree.leaf_id)


# the tail only


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io")
def test_context_reads_only_the_tail_of_a_large_session(tmp_path, capsys):
    path = tmp_path / "big.jsonl"
    gen_session_module().generate(path, target_bytes=4 << 20, seed=3,
                                  last_compaction_within_bytes=200_000)
    size = path.stat().st_size
    expected = full_context(path)

    for extra in ([], ["--for-model"]):
        before = rchar()
        code, out, err = run(capsys, "context", str(path), "--json", *extra)
        read = rchar() - before
        assert code == 0 and err == ""
        data = orjson.loads(out)
        assert data["leafId"] == expected.leaf_id
        if not extra:
            assert data["messages"] == expected.messages
        assert read < size // 4, f"context read {read:,} bytes of a {size:,}-byte file"

    # the same measure sees a whole-file reader read it all: it counts what it should
    before = rchar()
    code, _, _ = run(capsys, "show", str(path), "--json")
    assert code == 0 and rchar() - before >= size


def test_context_leaf_of_an_early_entry_still_reads_the_whole_branch(tmp_path, capsys):
    path = tmp_path / "big.jsonl"
    gen_session_module().generate(path, target_bytes=400_000, seed=5,
                                  last_compaction_within_bytes=50_000)
    snap = load(path)
    early = snap.entries[3]["id"]
    tree = Tree(snap.entries)
    code, out, _ = run(capsys, "context", str(path), "--leaf", early, "--json")
    assert code == 0
    assert orjson.loads(out)["messages"] == build_context(tree, early).messages


# rotated paths and archives


@pytest.fixture
def rotated(tmp_path):
    """(old path, archive, live successor) of a session rotated once, compressed."""
    s, _ = build_session(tmp_path / "sessions")
    old = s.path
    s.close()
    result = rotate(old)
    assert result.rotated and result.archive.endswith(".gz")
    for name in os.listdir(tmp_path / "sessions"):  # what a writer left beside the files
        if name.endswith(".lock"):
            os.unlink(tmp_path / "sessions" / name)
    return old, result.archive, result.successor


@pytest.mark.parametrize("command", ["show", "info", "context", "tree", "tail"])
def test_read_commands_follow_a_rotated_path_and_say_so(rotated, capsys, command, tmp_path):
    old, _, live = rotated
    before = listing(tmp_path)
    code, out, err = run(capsys, command, old)
    assert code == 0
    assert err == f"journal: {old} was rotated; reading {live}\n"
    code, direct, _ = run(capsys, command, live)
    assert out == direct
    code, out, err = run(capsys, command, old, "--no-follow")
    assert code == 2 and out == ""
    one_error(err)
    assert "no such file" in err
    assert listing(tmp_path) == before


def test_show_info_context_and_tree_read_a_compressed_archive(rotated, capsys, tmp_path):
    old, archive, _ = rotated
    before = listing(tmp_path)
    with gzip.open(archive, "rb") as f:
        plain = tmp_path / "plain.jsonl"
        plain.write_bytes(f.read())
    entries = load(plain).entries
    plain.unlink()

    code, out, err = run(capsys, "show", archive, "--json")
    assert code == 0 and err == ""
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [r["entry"] for r in rows if "entry" in r] == entries
    code, out, err = run(capsys, "info", archive, "--json")
    info = orjson.loads(out)
    assert code == 0 and info["entries"] == len(entries) and info["diagnostics"] == []
    code, out, err = run(capsys, "context", archive, "--json")
    assert code == 0 and orjson.loads(out)["leafId"] == entries[-1]["id"]
    code, out, err = run(capsys, "tree", archive)
    assert code == 0 and out.splitlines()[-1].lstrip().startswith(entries[-1]["id"])
    code, out, err = run(capsys, "tail", "-n", "2", "--json", archive)
    assert code == 0 and err == ""
    assert [orjson.loads(line) for line in out.splitlines()] == entries[-2:]
    assert listing(tmp_path) == before


def test_a_damaged_archive_is_one_error_line(tmp_path, capsys):
    archive = tmp_path / "a.jsonl.gz"
    data = gzip.compress(b'{"type":"session","version":3,"id":"x","timestamp":"t","cwd":"/"}\n')
    archive.write_bytes(data[: len(data) // 2])
    for command in ("show", "info", "context", "tree"):
        code, out, err = run(capsys, command, str(archive))
        assert code == 2 and out == ""
        one_error(err)
        assert "gzip" in err


# files that are not sessions

NOT_SESSIONS = {
    "empty": b"",
    "binary": bytes(range(256)) * 3,
    "other-json": b'{"a": 1}\n[2]\n',
}


@pytest.mark.parametrize("kind", sorted(NOT_SESSIONS))
@pytest.mark.parametrize("argv", [["lineage"], ["tail"], ["rotate", "--dry-run"], ["rotate"],
                                  ["lineage", "--json"]])
def test_a_file_that_is_no_session_is_an_error(tmp_path, capsys, kind, argv):
    path = tmp_path / f"{kind}.jsonl"
    path.write_bytes(NOT_SESSIONS[kind])
    before = listing(tmp_path)
    code, out, err = run(capsys, *argv, str(path))
    assert code == 2 and out == ""
    one_error(err)
    assert "not a session file" in err
    assert listing(tmp_path) == before


def test_journal_tail_is_the_same_error(tmp_path, capsys):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    code, out, err = run(capsys, str(path), entry=tail_main)
    assert code == 2 and out == ""
    one_error(err)


def test_tail_of_an_unreadable_file_says_permission_denied(tmp_path):
    prefix = as_nobody()
    os.chmod(tmp_path, 0o755)
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        path = s.path
    os.chmod(path, 0)
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    before = listing(tmp_path)
    for argv in (["tail", path], ["show", path]):
        proc = subprocess.run([*prefix, sys.executable, "-m", "journal.cli", *argv],
                              capture_output=True, text=True, env=env, cwd="/", timeout=60)
        assert proc.returncode == 2 and proc.stdout == ""
        one_error(proc.stderr)
        assert "permission denied" in proc.stderr, proc.stderr
    assert listing(tmp_path) == before


# no lock files


def test_read_commands_and_a_dry_run_create_no_lock_file(tmp_path, capsys):
    s, _ = build_session(tmp_path / "sessions")
    path = s.path
    s.close()
    for name in os.listdir(tmp_path / "sessions"):
        if name.endswith(".lock"):
            os.unlink(tmp_path / "sessions" / name)
    before = listing(tmp_path)
    for argv in (["show"], ["info"], ["context"], ["context", "--for-model"], ["tree"],
                 ["lineage"], ["tail"], ["rotate", "--dry-run"], ["repair", "--check"],
                 ["repair", "--dry-run"]):
        code, out, err = run(capsys, *argv, path)
        assert code == 0, (argv, err)
        assert listing(tmp_path) == before, argv
    code, out, _ = run(capsys, "rotate", "--dry-run", "--json", path)
    assert orjson.loads(out)["rotated"] is True  # the dry run did look at the whole plan


# every read command against every kind of bad input

BAD_INPUTS = {
    "missing": None,
    "directory": "dir",
    "empty": b"",
    "binary": bytes(range(256)) * 4,
    "random": os.urandom(4096).replace(b"\n", b"") + b"\x00\xff",
    "non-session JSONL": b'{"hello": "world"}\n{"type": 3}\n',
    "one huge line": b'{"x": "' + b"y" * (3 << 20) + b'"',
}
READ_COMMANDS = [["show"], ["info"], ["context"], ["context", "--for-model"], ["tree"],
                 ["tree", "--json"], ["lineage"], ["tail"], ["rotate", "--dry-run"],
                 ["show", "--no-follow"], ["context", "--json"]]


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
@pytest.mark.parametrize("name", ["s.jsonl", "a dir/sé ssion ✓.jsonl"])
def test_every_read_command_refuses_bad_input_cleanly(tmp_path, capsys, kind, name):
    path = tmp_path / name
    path.parent.mkdir(exist_ok=True)
    content = BAD_INPUTS[kind]
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    before = listing(tmp_path)
    for argv in READ_COMMANDS:
        if argv == ["tail"] and kind == "directory":
            continue  # a folder of sessions: what `tail DIR` is for
        code, out, err = run(capsys, *argv, str(path))
        assert code == 2 and out == "", (argv, out, err)
        one_error(err)
        assert listing(tmp_path) == before, argv
