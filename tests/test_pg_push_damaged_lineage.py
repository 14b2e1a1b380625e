"""`journal push` of a rotated lineage one of whose `.gz` archives is damaged. The archive's
session id and seal cannot be read, so no seal links it to the files around it; the file
whose header's `parentSession` names it, and the sealed file whose seal names its file, are
of its lineage all the same. The lineage is refused whole (nothing of it stored, the damaged
file named with what to do, exit 2); the folder's other lineages are pushed."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")

from journal import Session  # noqa: E402
from journal.cli import main  # noqa: E402
from journal.pg.connect import connect  # noqa: E402
from journal.pg.transfer import PushRefused, push  # noqa: E402


def fill(session: Session, tag: str) -> None:
    kept = None
    for i in range(40):
        entry = session.append_message({"role": "user", "content": f"{tag} {i} " + "y" * 300,
                                        "timestamp": 1})
        if i == 37:
            kept = entry
    session.append_compaction(f"summary {tag}", kept, 500)


def rotated_twice(folder: Path, archive_dir: Path | None = None) -> tuple[Path, list[Path]]:
    """A live file continuing two compressed archives: (live, [A0, A1]), A0's seal naming
    A1's session and the live file's header naming A1."""
    folder.mkdir(parents=True)
    where = None if archive_dir is None else str(archive_dir)
    with Session.create(str(folder), cwd="/w") as session:
        fill(session, "one")
        first = session.rotate(archive_dir=where)
        fill(session, "two")
        second = session.rotate(archive_dir=where)
        session.append_message({"role": "user", "content": "live", "timestamp": 1})
        live = Path(session.path)
    assert first.archive is not None and second.archive is not None
    archives = [Path(first.archive), Path(second.archive)]
    assert all(p.name.endswith(".jsonl.gz") and p.is_file() for p in archives)
    return live, archives


def damage(archive: Path, how: str) -> None:
    """Cut the archive short, or flip bytes of its deflate data (its header line lost)."""
    data = bytearray(archive.read_bytes())
    if how == "truncated":
        data = data[:len(data) // 2]
    else:
        for i in range(12, 40):  # past the 10-byte gzip header
            data[i] ^= 0x5A
    archive.write_bytes(bytes(data))
    with pytest.raises((EOFError, OSError, zlib.error)):
        gzip.decompress(archive.read_bytes())


def stored(pg_url: str) -> set[str]:
    """The file names of the sessions the database holds (none: no schema made)."""
    with connect(pg_url) as conn:
        return {str(r[0]) for r in conn.execute(
            "SELECT file_name FROM journal.streams WHERE generation IS NOT NULL")}


def names(folder: Path, files: list[Path]) -> set[str]:
    return {str(p.relative_to(folder)) for p in files}


@pytest.mark.parametrize("how", ["truncated", "flipped"])
@pytest.mark.parametrize("which", [0, 1])
def test_a_folder_push_refuses_a_lineage_with_a_damaged_archive_whole(
        pg_url: str, tmp_path: Path, which: int, how: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A0 damaged: the successor A1 names it as parent. A1 damaged: A0's seal names it and
    it is the live file's parent. Either way none of A0, A1 and the live file is stored,
    and the other lineage of the folder is."""
    folder = tmp_path / "src"
    live, archives = rotated_twice(folder)
    other, other_archives = rotated_twice(folder / "other")
    damage(archives[which], how)
    assert main(["push", str(folder), pg_url]) == 2
    err = capsys.readouterr().err.splitlines()
    assert stored(pg_url) == names(folder, [other, *other_archives])
    refused = [line for line in err if line.startswith("Error: ")]
    assert len(refused) == 3, err
    damaged = str(archives[which])
    assert f"Error: {damaged}: refused: not a readable gzip archive" in "\n".join(refused)
    assert any(line.startswith(f"Error: {damaged}: ") and "nothing of its lineage was pushed"
               in line and "move it away and push again" in line for line in refused), err
    for path in {live, *archives} - {archives[which]}:
        assert (f"Error: {path}: refused: not pushed: {damaged} of its lineage is refused"
                in refused), err


@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_a_push_of_the_live_file_refuses_its_lineage_through_a_damaged_archive(
        pg_url: str, tmp_path: Path, how: str) -> None:
    folder = tmp_path / "src"
    live, archives = rotated_twice(folder)
    damage(archives[1], how)
    with pytest.raises(PushRefused) as raised:
        push(str(live), pg_url)
    rows = raised.value.result.sessions
    assert {row["file"] for row in rows} >= {str(live), str(archives[1])}
    assert {row["action"] for row in rows} == {"refused"}, rows
    assert stored(pg_url) == set()


def test_a_damaged_archive_rotation_put_outside_the_folder_refuses_its_lineage(
        pg_url: str, tmp_path: Path) -> None:
    """`journal rotate --archive-dir`: the folder push takes the archives its lineages
    continue from outside it; a damaged one, whose seal cannot be read, was left out as a
    fork's parent would be, and the live file was stored without it."""
    folder = tmp_path / "src"
    live, archives = rotated_twice(folder, archive_dir=tmp_path / "elsewhere")
    assert all(not p.is_relative_to(folder) for p in archives)
    damage(archives[1], "flipped")
    with pytest.raises(PushRefused) as raised:
        push(str(folder), pg_url)
    assert str(archives[1]) in {row["file"] for row in raised.value.result.refused}
    assert stored(pg_url) == set()


def test_with_the_damaged_archive_moved_away_the_rest_of_its_lineage_is_pushed(
        pg_url: str, tmp_path: Path) -> None:
    """What the refusal says to do: the files left are pushed, each on its own."""
    folder = tmp_path / "src"
    live, archives = rotated_twice(folder)
    damage(archives[1], "truncated")
    with pytest.raises(PushRefused):
        push(str(folder), pg_url)
    archives[1].rename(tmp_path / archives[1].name)
    result = push(str(folder), pg_url)
    assert {row["action"] for row in result.sessions} == {"new"}
    assert stored(pg_url) == names(folder, [live, archives[0]])



@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_a_push_of_the_oldest_archive_refuses_it_with_its_damaged_successor(
        pg_url: str, tmp_path: Path, how: str) -> None:
    """From A0 the lineage is followed by its seal, which cannot be followed into A1 whose
    header cannot be read: A0 was stored alone, as if it ended its lineage."""
    folder = tmp_path / "src"
    live, archives = rotated_twice(folder)
    damage(archives[1], how)
    with pytest.raises(PushRefused) as raised:
        push(str(archives[0]), pg_url)
    rows = raised.value.result.sessions
    assert {row["file"] for row in rows} >= {str(archives[0]), str(archives[1])}
    assert {row["action"] for row in rows} == {"refused"}, rows
    assert stored(pg_url) == set()
