"""`journal ls` tokens and cost columns, and the cache that spares reading unchanged sessions
(journal.rowcache): used when nothing changed, read again after an append, a replacement of
the same size, an in-place rewrite with its time put back, and a rotation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_usage import as_sums, oracle, reply, rotated_lineage, user

import journal.accounting
import journal.catalog
import journal.discovery
from journal import Session, load_prices, rotate, sessions, usage
from journal.rowcache import RowCache, default_cache_path

OLD = time.time() - 30 * 86400


def age(folder: Path) -> None:
    """Files last modified long ago: the cache keeps only what was not just modified."""
    for p in folder.rglob("*"):
        if p.is_file():
            os.utime(p, (OLD, OLD))


class Reads:
    """Which files the catalog parsed: the tail reads and the whole-file loads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tails: list[str] = []
        self.loads: list[str] = []
        real_resume, real_load = journal.catalog.resume, journal.accounting.load

        def resume(path, *a, **k):
            self.tails.append(os.path.basename(path))
            return real_resume(path, *a, **k)

        def load(path, *a, **k):
            self.loads.append(os.path.basename(path))
            return real_load(path, *a, **k)

        monkeypatch.setattr(journal.catalog, "resume", resume)
        monkeypatch.setattr(journal.accounting, "load", load)

    def clear(self) -> None:
        self.tails.clear()
        self.loads.clear()


def listed(folder: Path, cache_file: Path) -> dict[str, journal.catalog.SessionRow]:
    cache = RowCache(str(cache_file))
    rows = sessions([str(folder)], prices=load_prices(), cache=cache)
    cache.save()
    return {os.path.basename(r.path): r for r in rows}


def small(folder: Path, name: str, replies: int, cost: float = 0.01) -> str:
    """A session of `replies` replies, compacted before the last one (so it can rotate)."""
    s = Session.create(folder, cwd="/w")
    s.append_session_info(name)
    for i in range(replies):
        asked = s.append_message(user(f"q{i}"))
        if i == replies - 1 and i:
            s.append_compaction("summary", asked, 1000)
        s.append_message(reply("claude-sonnet-4-5", 100 + i, 10, cost=cost))
    s.close()
    return s.path


def test_tokens_and_cost_are_usages_counting_each_entry_of_a_lineage_once(tmp_path):
    files, written = rotated_lineage(tmp_path)
    [row] = sessions([str(tmp_path)], prices=load_prices())
    expected = oracle([Path(f) for f in files])
    assert row.files == tuple(os.path.realpath(f) for f in files)
    assert row.usage is not None and row.usage.messages == len(written) == expected["messages"]
    assert row.tokens == sum(expected[k] for k in ("input", "output", "cacheRead",
                                                   "cacheWrite"))
    assert row.cost == pytest.approx(expected["cost"])
    assert as_sums(row.to_json()["usage"]) == pytest.approx(
        as_sums(usage([tmp_path]).to_json()["rows"][0]))
    # a reply that recorded no cost is priced from the table, as usage prices it
    path = small(tmp_path / "b", "uncosted", 2, cost=0.0)
    [other] = sessions([path], prices=load_prices())
    price = load_prices().price_for("claude-sonnet-4-5")
    assert price is not None
    assert other.cost == pytest.approx(price.cost(100 + 101, 20, 0, 0))
    assert sessions([str(tmp_path)])[0].usage is None  # not asked for: no whole-file read


def test_the_second_run_reads_nothing_that_did_not_change(tmp_path, monkeypatch):
    folder = tmp_path / "s"
    for n in range(3):
        small(folder, f"n{n}", 2 + n)
    rotated_lineage(folder / "r")
    age(folder)
    reads = Reads(monkeypatch)
    cache_file = tmp_path / "cache" / "catalog.json"
    first = listed(folder, cache_file)
    assert len(first) == 4 and len(reads.tails) == 4 and len(reads.loads) == 6
    assert cache_file.exists() and (cache_file.stat().st_mode & 0o777) == 0o600
    reads.clear()

    def no_lineage(path):
        raise AssertionError(f"lineage followed again for {path}")

    with monkeypatch.context() as m:
        m.setattr(journal.discovery, "lineage_of", no_lineage)
        second = listed(folder, cache_file)
    assert reads.tails == [] and reads.loads == []
    assert {k: (r.to_json(), r.usage) for k, r in second.items()} == \
        {k: (r.to_json(), r.usage) for k, r in first.items()}
    # other prices: the rows are kept, the costs are counted again
    prices = tmp_path / "prices.json"
    table = load_prices().to_json()
    for m in table["models"]:
        m["output"] *= 2
    prices.write_text(json.dumps(table))
    cache = RowCache(str(cache_file))
    sessions([str(folder)], prices=load_prices(prices), cache=cache)
    assert reads.tails == [] and len(reads.loads) == 6
    # the lock state is never cached
    [name] = [k for k, r in first.items() if r.name == "n0"]
    s = Session.open(first[name].path)
    try:
        assert listed(folder, cache_file)[name].state == "locked"
    finally:
        s.close()


def test_a_change_to_any_file_of_a_lineage_is_read_again(tmp_path, monkeypatch):
    folder = tmp_path / "s"
    paths = {n: small(folder, f"name-{n}", 3) for n in "abcd"}
    age(folder)
    cache_file = tmp_path / "catalog.json"
    before = listed(folder, cache_file)
    reads = Reads(monkeypatch)

    # an append
    s = Session.open(paths["a"])
    s.append_message(reply("claude-sonnet-4-5", 5000, 1, cost=1.0))
    s.close()
    # a replacement of the same size, renamed over it, its time put back
    old = Path(paths["b"])
    st = old.stat()
    data = old.read_bytes().replace(b"name-b", b"NAME-B")
    assert len(data) == st.st_size
    tmp = folder / "b.tmp"
    tmp.write_bytes(data)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, old)
    assert old.stat().st_size == st.st_size and old.stat().st_mtime_ns == st.st_mtime_ns
    # a rewrite in place of the same size, its time put back (the same inode)
    inplace = Path(paths["c"])
    st = inplace.stat()
    with open(inplace, "r+b") as f:
        body = f.read()
        f.seek(0)
        f.write(body.replace(b"name-c", b"NAME-C"))
    os.utime(inplace, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert inplace.stat().st_ino == st.st_ino and inplace.stat().st_mtime_ns == st.st_mtime_ns

    after = listed(folder, cache_file)
    names = {os.path.basename(p): n for n, p in paths.items()}
    assert sorted(names[f] for f in reads.tails) == ["a", "b", "c"]
    base = {n: os.path.basename(p) for n, p in paths.items()}
    assert after[base["a"]].cost == pytest.approx(before[base["a"]].cost + 1.0)
    assert after[base["a"]].entries == before[base["a"]].entries + 1
    assert after[base["b"]].name == "NAME-B" and after[base["c"]].name == "NAME-C"
    assert after[base["d"]].to_json() == before[base["d"]].to_json()

    # a rotation: the live file moves on, its old self is archived; one row, same usage
    age(folder)
    listed(folder, cache_file)
    result = rotate(paths["d"])
    assert result.rotated and result.successor
    reads.clear()
    rotated_rows = listed(folder, cache_file)
    row = rotated_rows[os.path.basename(result.successor)]
    assert base["d"] not in rotated_rows
    assert len(row.files) == 2 and row.usage == before[base["d"]].usage
    assert reads.tails == [os.path.basename(result.successor)]


def test_the_command_keeps_its_cache_where_it_says_and_no_cache_keeps_none(tmp_path,
                                                                           monkeypatch):
    folder = tmp_path / "s"
    small(folder, "one", 2)
    age(folder)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    env.pop("XDG_CACHE_HOME", None)
    argv = [sys.executable, "-m", "journal.cli", "ls", str(folder), "--json"]

    def ls(*extra: str, **more: str) -> list[dict]:
        proc = subprocess.run([*argv, *extra], capture_output=True, text=True,
                              env={**env, **more}, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    [row] = ls("--no-cache")
    assert not (tmp_path / "home" / ".cache").exists()
    assert row["tokens"] == 2 * 10 + 100 + 101 and row["cost"] == pytest.approx(0.02)
    assert ls() == [row]
    assert (tmp_path / "home" / ".cache" / "journal" / "catalog.json").is_file()
    assert ls(XDG_CACHE_HOME=str(tmp_path / "xdg")) == [row]
    assert (tmp_path / "xdg" / "journal" / "catalog.json").is_file()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x2"))
    assert default_cache_path() == str(tmp_path / "x2" / "journal" / "catalog.json")
    # a damaged cache is ignored, and replaced
    (tmp_path / "xdg" / "journal" / "catalog.json").write_bytes(b"{not json")
    assert ls(XDG_CACHE_HOME=str(tmp_path / "xdg")) == [row]
    text = subprocess.run([*argv[:-1]], capture_output=True, text=True, env=env, timeout=60)
    heading = text.stdout.splitlines()[0].split("\t")
    assert heading[9:12] == ["tokens", "cost", "state"]
    assert text.stdout.splitlines()[1].split("\t")[9:11] == ["221", "0.0200"]
