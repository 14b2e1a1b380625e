"""The ids repair makes up are derived from the session, not drawn at random.

`journal info`, `journal repair --dry-run`, `repair --check --json` and the repair itself all
name the id a duplicate is renamed to; they must name the same one, run after run, on a file
and on a database session. The rule (docs/format.md § 5) is checked here from its words: the
id a duplicate gets is the first free `blake2b("duplicate_id:<offset>:<h>:<attempt>", 4
bytes)`, `h` the hex blake2b-128 of the line's bytes; free means no id of the session, none
its entries name, none in the bytes it drops, and none made for another line before. The
other things repair makes up (a synthetic result's id, the leaf marker's, the session id of a
lost header) are the same from one look to the next too.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from corruption import Session, call, line_offset, reused_id, split_lines, text

import journal
import journal.model
from journal.cli import main
from journal.repair import plan


def derived(seed: str, taken: Iterable[str] = ()) -> str:
    """docs/format.md § 5: the first blake2b("<seed>:<attempt>", 4 bytes) not taken."""
    attempt, avoid = 0, set(taken)
    while True:
        made = hashlib.blake2b(f"{seed}:{attempt}".encode(), digest_size=4).hexdigest()
        if made not in avoid:
            return made
        attempt += 1


def duplicate_seed(data: bytes, index: int) -> str:
    """The seed of line `index` (0-based: the header is 0) of `data`: its offset and a hash
    of its bytes."""
    line = split_lines(data)[index]
    return (f"duplicate_id:{line_offset(data, index)}:"
            f"{hashlib.blake2b(line, digest_size=16).hexdigest()}")


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(list(argv))
    out = capsys.readouterr().out
    assert code in (0, 1), out
    return json.loads(out)


def renamed_to(report: dict[str, Any]) -> list[str]:
    return [p["action"].removeprefix("renamed to ") for p in report["problems"]
            if p["kind"] == "duplicate_id"]


def every_look(capsys: pytest.CaptureFixture[str], where: str) -> list[list[str]]:
    """The new ids of the duplicates as two `info`s, a dry run, a check and the repair say."""
    return [renamed_to(cli_json(capsys, *argv)) for argv in (
        ["info", where, "--json"],
        ["info", where, "--json"],
        ["repair", where, "--dry-run", "--json"],
        ["repair", where, "--check", "--json"],
        ["repair", where, "--json"],
    )]


def test_info_dry_run_check_and_repair_name_one_id_for_a_duplicate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = reused_id().bytes()
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    looks = every_look(capsys, str(path))
    expected = derived(duplicate_seed(data, 4))
    assert looks == [[expected]] * 5
    ids = [e["id"] for e in journal.load(str(path)).entries]
    assert ids == ["e01", "e02", "e03", expected, "e05", "e06", "e07"]
    assert not journal.repair(str(path)).changed  # a second repair finds nothing


def test_info_dry_run_and_repair_name_one_id_on_a_database_session(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
    from journal.pg.repair import repair_database
    from journal.pg.url import session_url
    from journal.storage import as_storage

    data = reused_id().bytes()
    url = session_url(pg_url, str(uuid.uuid4()))
    as_storage(url).create(data)
    looks = every_look(capsys, url)
    expected = derived(duplicate_seed(data, 4))  # the bytes a file holding them would give
    assert looks == [[expected]] * 5
    assert [e["id"] for e in journal.load(url).entries][3] == expected
    assert not repair_database(url).changed


def test_a_headerless_file_gets_one_session_id_whoever_looks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a pi-style name to read it from, the session id of the header repair writes
    is made from the first line and its time: info twice, the dry run and the repair name
    the same one."""
    s = Session()
    s.turn("a")
    data = b"".join(line + b"\n" for line in s.lines()[1:])  # the header lost
    path = tmp_path / "no-pi-name.jsonl"
    path.write_bytes(data)

    def said(report: dict[str, Any]) -> list[str]:
        return [p["detail"] for p in report["problems"] if p["kind"] == "missing_header"]

    first = split_lines(data)[0]
    digest = bytearray(hashlib.blake2b(b"missing_header:no-pi-name.jsonl:" + first,
                                       digest_size=16).digest())
    stamp = datetime.fromisoformat(s.entries[0]["timestamp"].replace("Z", "+00:00"))
    digest[:6] = (int(stamp.timestamp()) * 1000).to_bytes(6, "big")  # a whole second
    digest[6], digest[8] = (digest[6] & 0x0F) | 0x70, (digest[8] & 0x3F) | 0x80
    expected = str(uuid.UUID(bytes=bytes(digest)))  # a UUID v7 of the first entry's time
    looks = [said(cli_json(capsys, *argv)) for argv in (
        ["info", str(path), "--json"], ["info", str(path), "--json"],
        ["repair", str(path), "--dry-run", "--json"], ["repair", str(path), "--json"])]
    assert looks == [[f"session id {expected}"]] * 4
    assert journal.load(str(path)).header["id"] == expected
    other = tmp_path / "its-copy.jsonl"  # the same bytes under another name: another id
    other.write_bytes(data)
    [[copied]] = [said(cli_json(capsys, "info", str(other), "--json"))]
    assert copied.startswith("session id ") and copied != f"session id {expected}"


def ids_planned(path: Path, *, strict: bool = False) -> list[str]:
    return [item.entry["id"] for item in plan(str(path), strict=strict).items]


def test_a_synthetic_result_gets_the_same_id_every_time(tmp_path: Path) -> None:
    s = Session()
    s.user("q")
    s.assistant(text("reading"), call("c1"))
    s.user("next")  # the result of c1 was never written
    s.assistant(text("done"))
    path = tmp_path / "s.jsonl"
    path.write_bytes(s.bytes())
    planned = ids_planned(path, strict=True)
    assert planned == ids_planned(path, strict=True)
    made = derived("synthetic_result:e02:c1", ["e01", "e02", "e03", "e04"])
    assert planned == ["e01", "e02", made, "e03", "e04"]
    journal.repair(str(path), strict=True)
    assert [e["id"] for e in journal.load(str(path)).entries] == planned


def test_the_marker_pinning_the_leaf_gets_the_same_id_every_time(tmp_path: Path) -> None:
    s = Session()
    s.turn("a")
    s.result("no-such-call")  # an orphan on the last line: the leaf would be this orphan
    path = tmp_path / "s.jsonl"
    path.write_bytes(s.bytes())
    planned = ids_planned(path)
    assert planned == ids_planned(path)
    made = derived("leaf_pinned:e04", [f"e0{n}" for n in range(1, 6)])
    assert planned == ["e01", "e02", "e03", "e04", "e05", made]
    journal.repair(str(path))
    assert [e["id"] for e in journal.load(str(path)).entries] == planned


@pytest.mark.parametrize("how", ["an entry's id", "a parentId naming nothing",
                                 "a torn line's id"])
def test_an_id_the_derivation_would_pick_that_the_session_holds_is_passed_over(
        tmp_path: Path, how: str) -> None:
    """A line after the duplicate holds or names the id its first attempt gives (or a torn
    line, whose bytes repair drops, held it): the rename takes the next attempt's, and that
    line keeps what it meant."""
    s = reused_id()
    first = derived(duplicate_seed(s.bytes(), 4))  # what the duplicate would get
    planted = s.lines()
    if how == "an entry's id":
        planted.append(orjson.dumps({**s.entries[-1], "id": first, "parentId": "e07"}))
    elif how == "a parentId naming nothing":
        planted.append(orjson.dumps({**s.entries[-1], "id": "e08", "parentId": first}))
    data = b"".join(line + b"\n" for line in planted)
    if how == "a torn line's id":  # cut short by a crash: repair drops it
        data += b'{"type":"message","id":"%s","parentId":"e07","timestamp":' % first.encode()
    assert duplicate_seed(data, 4) == duplicate_seed(s.bytes(), 4)  # the line is as it was
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    report = journal.repair(str(path))
    [rename] = [p for p in report.problems if p.kind == "duplicate_id"]
    second = derived(duplicate_seed(data, 4), [first])
    assert second != first and rename.action == f"renamed to {second}"
    last = journal.load(str(path)).entries[-1]
    if how == "an entry's id":
        assert (last["id"], last["parentId"]) == (first, "e07")
    elif how == "a parentId naming nothing":
        # its parent is nowhere: attached to the entry before it, not to the renamed one
        [missing] = [p for p in report.problems if p.kind == "missing_parent"]
        assert missing.entry_id == "e08" and last["parentId"] == "e07"
    assert first not in {e["id"] for e in journal.load(str(path)).entries} - {last["id"]}
    assert not journal.repair(str(path)).changed


def test_two_made_ids_never_coincide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a hash that gives every seed the same first attempt, the second duplicate must
    pass over the id made for the first one."""
    monkeypatch.setattr(journal.model, "_hex8",
                        lambda seed: f"{int(seed.rsplit(':', 1)[1]):08x}", raising=False)
    s = reused_id()  # line 5 reuses e02
    s.assistant(text("reusing e06"))  # and line 9, e06 (the label)
    s.entries[-1]["id"] = "e06"
    path = tmp_path / "s.jsonl"
    path.write_bytes(s.bytes())
    report = journal.repair(str(path))
    assert [p.action for p in report.problems if p.kind == "duplicate_id"] == [
        "renamed to 00000000", "renamed to 00000001"]
    ids = [e["id"] for e in journal.load(str(path)).entries]
    assert len(set(ids)) == len(ids) == 8
    assert not journal.repair(str(path)).changed
