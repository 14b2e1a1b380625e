"""Tests of the tools against a hostile workspace: swaps racing the file tools, hard links to
files outside, FIFOs, and huge single-line files.

Each test reproduces an escape or a hang found on the old tools (issue 11, items 8 and 13);
the slow or blocking parts run in subprocesses with a timeout so a regression fails instead
of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mounts import tmpfs

from tools import BashTool, EditTool, GrepTool, LsTool, ReadTool, Workspace, WriteTool

REPO = Path(__file__).resolve().parents[1]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _run_python(code: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter that imports this checkout's tools package."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


# --- swap race -----------------------------------------------------------------------------

SWAPPER = """
import ctypes, os, sys, time
ws, outside, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
os.chdir(ws)
os.symlink(outside, "d.link")
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
end = time.monotonic() + seconds
swaps = 0
while time.monotonic() < end:
    if libc.renameat2(AT_FDCWD, b"d", AT_FDCWD, b"d.link", RENAME_EXCHANGE) != 0:
        if swaps == 0:
            print("unsupported", os.strerror(ctypes.get_errno()))
            sys.exit()
        raise OSError(ctypes.get_errno(), "renameat2")
    swaps += 1
if os.path.islink("d"):
    libc.renameat2(AT_FDCWD, b"d", AT_FDCWD, b"d.link", RENAME_EXCHANGE)
print(swaps)
"""


def test_swapping_a_folder_for_a_symlink_never_redirects_a_write(
    ws: Workspace, outside: Path
) -> None:
    """A process keeps exchanging `d` with a symlink to an outside folder (atomically, with
    renameat2) while write and edit work through `d/`: not one byte may land outside, and
    the tools must still get work done."""
    (ws.root / "d").mkdir()
    (ws.root / "d" / "target.txt").write_text("A\n")
    (outside / "target.txt").write_text("A\n")
    before = _snapshot(outside)

    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(ws.root), str(outside), "2.5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    write, edit = WriteTool(ws), EditTool(ws)
    written = edited = 0
    crashes: list[BaseException] = []
    letters = ("A", "B")
    try:
        deadline = time.monotonic() + 2.0
        i = 0
        while time.monotonic() < deadline:
            old, new = letters[edited % 2], letters[(edited + 1) % 2]
            try:
                if not write.run(
                    {"path": f"d/f{i % 50}.txt", "content": f"payload {i}\n"}
                ).is_error:
                    written += 1
                if not edit.run(
                    {"path": "d/target.txt", "old_text": old, "new_text": new}
                ).is_error:
                    edited += 1
            except Exception as exc:  # a crash is a failure too, but reported after the leak
                crashes.append(exc)
            i += 1
    finally:
        out, _ = swapper.communicate(timeout=10)
    if out.startswith("unsupported"):
        pytest.skip(f"renameat2(RENAME_EXCHANGE) does not work here: {out.strip()}")
    assert int(out) > 100, "the swapper did not get to swap"
    landed = sorted(set(_snapshot(outside).items()) - set(before.items()))
    assert not landed, f"{len(landed)} files written outside the workspace: {landed[:3]}"
    assert _snapshot(outside) == before
    assert not crashes, crashes[:3]
    assert written > 20 and edited > 2, (written, edited)
    assert not any(p.name.startswith("f") for p in outside.iterdir())


def test_symlink_planted_at_the_file_itself_is_never_written_through(
    ws: Workspace, outside: Path
) -> None:
    (ws.root / "f.txt").symlink_to(outside / "secret.txt")
    for tool, args in [
        (WriteTool(ws), {"path": "f.txt", "content": "owned\n"}),
        (EditTool(ws), {"path": "f.txt", "old_text": "top", "new_text": "no"}),
    ]:
        result = tool.run(args)
        assert result.is_error and "outside the workspace" in result.content
    assert (outside / "secret.txt").read_text() == "top secret\n"


# --- hard links ------------------------------------------------------------------------------


def test_edit_and_write_refuse_a_file_with_several_hard_links(ws: Workspace, outside: Path) -> None:
    os.link(outside / "secret.txt", ws.root / "hl.txt")
    edit = EditTool(ws).run({"path": "hl.txt", "old_text": "top", "new_text": "no"})
    assert edit.is_error
    assert "hard link" in edit.content and "hl.txt" in edit.content
    write = WriteTool(ws).run({"path": "hl.txt", "content": "owned\n"})
    assert write.is_error and "hard link" in write.content
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert ReadTool(ws).run({"path": "hl.txt"}).content == "top secret\n"


def test_hard_link_made_by_the_bash_tool_is_refused(ws: Workspace, outside: Path) -> None:
    made = BashTool(ws).run({"command": f"ln {outside / 'secret.txt'} hl.txt"})
    assert not made.is_error, made.content
    result = EditTool(ws).run({"path": "hl.txt", "old_text": "secret", "new_text": "public"})
    assert result.is_error and "hard link" in result.content
    assert (outside / "secret.txt").read_text() == "top secret\n"


# --- FIFOs and other non-regular files --------------------------------------------------------


def test_read_grep_write_edit_refuse_a_fifo_made_by_bash_without_hanging(ws: Workspace) -> None:
    assert not BashTool(ws).run({"command": "mkfifo p"}).is_error
    code = f"""
    from tools import EditTool, GrepTool, ReadTool, Workspace, WriteTool
    ws = Workspace({str(ws.root)!r})
    for result in [
        ReadTool(ws).run({{"path": "p"}}),
        GrepTool(ws).run({{"pattern": "x", "path": "p"}}),
        WriteTool(ws).run({{"path": "p", "content": "x"}}),
        EditTool(ws).run({{"path": "p", "old_text": "x", "new_text": "y"}}),
    ]:
        print(result.is_error, result.content)
    """
    started = time.monotonic()
    try:
        done = _run_python(code, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("a tool blocked on the FIFO")
    assert time.monotonic() - started < 10
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4, done.stdout
    for line in lines:
        assert line.startswith("True "), line
        assert "not a regular file" in line and "p" in line, line


def test_grep_of_a_folder_skips_a_fifo(ws: Workspace) -> None:
    os.mkfifo(ws.root / "p")
    (ws.root / "a.txt").write_text("needle\n")
    result = GrepTool(ws).run({"pattern": "needle"})
    assert result.content == "a.txt:1: needle"


# --- bounded memory on a huge single line ------------------------------------------------------


# The peak of this process image: VmHWM starts afresh at exec, whereas getrusage's ru_maxrss
# keeps the forking parent's peak (pytest's, which can be larger than anything measured here).
PEAK_CODE = """
with open("/proc/self/status") as status:
    print("PEAK", next(int(x.split()[1]) for x in status if x.startswith("VmHWM:")))
"""


def _peak_rss_mb(code: str) -> float:
    done = _run_python(textwrap.dedent(code) + PEAK_CODE, timeout=60)
    assert done.returncode == 0, done.stderr
    peak = [line for line in done.stdout.splitlines() if line.startswith("PEAK ")]
    return int(peak[0].split()[1]) / 1024


@pytest.fixture
def huge_line(ws: Workspace) -> Path:
    """A 200 MB file whose only line starts with text and goes on as a sparse hole."""
    path = ws.root / "huge.txt"
    with path.open("wb") as fh:
        fh.write(b"head of a very long line " * 400)
        fh.truncate(200 * 1024 * 1024)
    return path


def test_read_of_a_huge_single_line_uses_bounded_memory(ws: Workspace, huge_line: Path) -> None:
    baseline = _peak_rss_mb("import tools")
    peak = _peak_rss_mb(
        f"""
        from tools import ReadTool, Workspace
        result = ReadTool(Workspace({str(ws.root)!r})).run({{"path": "huge.txt"}})
        assert not result.is_error, result.content
        assert result.content.startswith("head of a very long line ")
        assert "line 1 is longer than 50000 characters" in result.content
        assert result.details["total_lines"] == 1
        """
    )
    assert peak - baseline < 40, f"read took {peak - baseline:.0f} MB more than the import"


def test_grep_of_a_huge_single_line_uses_bounded_memory(ws: Workspace, huge_line: Path) -> None:
    baseline = _peak_rss_mb("import tools, re")
    peak = _peak_rss_mb(
        f"""
        from tools import GrepTool, Workspace
        result = GrepTool(Workspace({str(ws.root)!r})).run({{"pattern": "head of a"}})
        assert not result.is_error, result.content
        assert result.content.startswith("huge.txt:1: head of a very long line")
        """
    )
    assert peak - baseline < 40, f"grep took {peak - baseline:.0f} MB more than the import"


def test_grep_says_when_it_searched_only_the_start_of_a_long_line(ws: Workspace) -> None:
    (ws.root / "long.txt").write_text("a" * 5000 + "needle\nneedle short\n")
    result = GrepTool(ws, max_line_bytes=1000).run({"pattern": "needle"})
    assert result.content.splitlines()[0] == "long.txt:2: needle short"
    assert "1 line longer than 1000 bytes was searched only in its first 1000 bytes" in (
        result.content
    )
    assert result.details["lines_cut"] == 1


def test_read_counts_lines_after_a_long_one(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text("x" * 10_000 + "\nsecond\nthird\n")
    tool = ReadTool(ws, max_chars=100)
    first = tool.run({"path": "f.txt"})
    assert first.content.startswith("x" * 100 + "\n")
    assert first.details["total_lines"] == 3
    assert tool.run({"path": "f.txt", "offset": 2}).content == "second\nthird\n"


# --- the workspace root itself -----------------------------------------------------------------


def test_a_replaced_workspace_root_is_refused(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    ws = Workspace(root)
    root.rename(tmp_path / "ws.old")
    root.symlink_to(outside)
    for tool, args in [
        (WriteTool(ws), {"path": "new.txt", "content": "x"}),
        (ReadTool(ws), {"path": "secret.txt"}),
        (LsTool(ws), {}),
    ]:
        result = tool.run(args)
        assert result.is_error and "workspace" in result.content, result.content
        assert "top secret" not in result.content
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


# --- symlinks inside the workspace still work ----------------------------------------------------


def test_symlinks_that_stay_inside_are_followed(ws: Workspace) -> None:
    (ws.root / "real").mkdir()
    (ws.root / "real" / "f.txt").write_text("inside\n")
    (ws.root / "rel_link.txt").symlink_to("real/f.txt")
    (ws.root / "abs_dir").symlink_to(ws.root / "real")
    assert ReadTool(ws).run({"path": "rel_link.txt"}).content == "inside\n"
    written = WriteTool(ws).run({"path": "abs_dir/f.txt", "content": "changed\n"})
    assert written.details["path"] == "real/f.txt"
    assert (ws.root / "rel_link.txt").is_symlink()
    assert (ws.root / "real" / "f.txt").read_text() == "changed\n"
    assert LsTool(ws).run({"path": "abs_dir"}).content == "f.txt"
    grep = GrepTool(ws).run({"pattern": "changed"})
    assert grep.content.splitlines() == ["rel_link.txt:1: changed", "real/f.txt:1: changed"]


def test_dotdot_after_a_symlink_goes_back_the_way_it_came(ws: Workspace) -> None:
    (ws.root / "a" / "b").mkdir(parents=True)
    (ws.root / "a" / "f.txt").write_text("in a\n")
    (ws.root / "deep").symlink_to("a/b")
    assert ReadTool(ws).run({"path": "deep/../f.txt"}).content == "in a\n"
    escape = ReadTool(ws).run({"path": "deep/../../.."})
    assert escape.is_error and "outside the workspace" in escape.content


def test_a_symlink_loop_is_an_error_result(ws: Workspace) -> None:
    (ws.root / "x").symlink_to("y")
    (ws.root / "y").symlink_to("x")
    for tool, args in [
        (ReadTool(ws), {"path": "x"}),
        (WriteTool(ws), {"path": "x/f.txt", "content": "z"}),
    ]:
        result = tool.run(args)
        assert result.is_error and "symbolic links" in result.content, result.content


def test_edit_and_write_on_a_full_disk_leave_the_file_as_it_was(tmp_path: Path) -> None:
    """A real 512k tmpfs: a change that does not fit fails before a byte of the file changes."""
    with tmpfs(tmp_path / "small", "512k") as mnt:
        original = b"".join(b"line %06d\n" % i for i in range(10_000))  # about 110 KB
        (mnt / "f.txt").write_bytes(original)
        with open(mnt / "filler", "wb") as f:
            free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
            f.write(b"x" * max(0, free - 60_000))
        tools = Workspace(mnt)
        grown = "line 000000\n" + "y" * 200_000 + "\n"
        edit = EditTool(tools).run({"path": "f.txt", "old_text": "line 000000\n",
                                    "new_text": grown})
        assert edit.is_error and "f.txt" in edit.content, edit.content
        assert (mnt / "f.txt").read_bytes() == original
        write = WriteTool(tools).run({"path": "f.txt", "content": "z" * 300_000})
        assert write.is_error
        assert (mnt / "f.txt").read_bytes() == original
