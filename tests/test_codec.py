"""The reader: complete lines only, every unusable byte range reported, never raising."""

from __future__ import annotations

import io
import subprocess
import sys

import orjson
import pytest

from journal import load, resume
from journal.codec import Line, iter_lines, iter_lines_reverse

HEADER = (
    b'{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}\n'
)


def entry(entry_id: str, parent: str | None, text: str = "hi") -> bytes:
    return orjson.dumps(
        {"type": "message", "id": entry_id, "parentId": parent,
         "timestamp": "2026-01-01T00:00:01.000Z",
         "message": {"role": "user", "content": text, "timestamp": 1}}
    ) + b"\n"


def write(tmp_path, data: bytes):
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    return path


def reasons(snap):
    return [(d.reason, d.offset, d.length, d.line) for d in snap.diagnostics]


def test_clean_file_has_no_diagnostics(tmp_path):
    snap = load(write(tmp_path, HEADER + entry("a", None) + entry("b", "a")))
    assert [e["id"] for e in snap.entries] == ["a", "b"]
    assert snap.diagnostics == [] and snap.end == snap.size


@pytest.mark.parametrize(
    "bad, reason",
    [
        (b'{"type":"message","id":"x"', "invalid_json"),
        (b'{"type":"message","id":"x","parentId":null,"message":{"role":"user","content":"\xff\xfe"}}',
         "invalid_utf8"),
        (b"\x00" * 4096, "nul_run"),
        (b"[1,2,3]", "not_object"),
        (b'"just a string"', "not_object"),
        (b'{"id":"x","parentId":null}', "missing_field"),
        (b'{"type":"message","parentId":null,"message":{}}', "missing_field"),
        (b'{"type":"message","id":"x","message":{}}', "missing_field"),
        (b'{"type":"model_change","id":"x","parentId":null,"provider":"a"}', "missing_field"),
        (b'{"type":"message","id":"x","parentId":null,"message":"text"}', "missing_field"),
    ],
)
def test_each_kind_of_damage_is_reported_with_its_range(tmp_path, bad, reason):
    before = HEADER + entry("a", None)
    snap = load(write(tmp_path, before + bad + b"\n" + entry("b", "a")))
    assert reasons(snap) == [(reason, len(before), len(bad), 3)]
    assert [e["id"] for e in snap.entries] == ["a", "b"]


def test_torn_tail_is_reported_and_not_consumed(tmp_path):
    good = HEADER + entry("a", None)
    torn = entry("b", "a")[:-10]
    snap = load(write(tmp_path, good + torn))
    assert reasons(snap) == [("torn_tail", len(good), len(torn), 3)]
    assert snap.end == len(good) and snap.size == len(good) + len(torn)
    assert [e["id"] for e in snap.entries] == ["a"]


def test_complete_json_without_newline_is_still_a_torn_tail(tmp_path):
    good = HEADER + entry("a", None)
    snap = load(write(tmp_path, good + entry("b", "a")[:-1]))
    assert [d.reason for d in snap.diagnostics] == ["torn_tail"]
    assert [e["id"] for e in snap.entries] == ["a"]


def test_crlf_and_blank_lines_and_bom_are_accepted(tmp_path):
    data = b"\xef\xbb\xbf" + HEADER.replace(b"\n", b"\r\n") + b"\n  \n" + entry("a", None).replace(
        b"\n", b"\r\n"
    )
    snap = load(write(tmp_path, data))
    assert snap.header["id"] == "s1"
    assert [e["id"] for e in snap.entries] == ["a"] and snap.diagnostics == []


def test_missing_header_and_extra_header(tmp_path):
    snap = load(write(tmp_path, entry("a", None) + HEADER + entry("b", "a")))
    assert snap.header is None
    assert [d.reason for d in snap.diagnostics] == ["missing_header", "extra_header"]
    assert [e["id"] for e in snap.entries] == ["a", "b"]


def test_line_numbers_are_recorded(tmp_path):
    snap = load(write(tmp_path, HEADER + b"\n" + entry("a", None) + b"junk\n" + entry("b", "a")))
    assert snap.lines == [3, 5]


def test_forward_reader_across_chunk_boundaries(monkeypatch):
    monkeypatch.setattr("journal.codec.CHUNK", 7)
    data = b"alpha\nbeta\n\ngamma-is-longer-than-a-chunk\ntail"
    items = list(iter_lines(io.BytesIO(data)))
    assert [i.raw for i in items if isinstance(i, Line)] == [
        b"alpha", b"beta", b"", b"gamma-is-longer-than-a-chunk"
    ]
    assert [i.offset for i in items if isinstance(i, Line)] == [0, 6, 11, 12]
    assert items[-1].reason == "torn_tail" and items[-1].offset == 41


def test_reverse_reader_matches_forward(tmp_path):
    data = b"".join([HEADER] + [entry(f"{i:08x}", None, "x" * (i * 37 % 300)) for i in range(200)])
    f = io.BytesIO(data)
    forward = [(i.offset, i.raw) for i in iter_lines(f)]
    backward = [(i.offset, i.raw) for i in iter_lines_reverse(f, len(data), block=64)]
    assert backward == forward[::-1]


def test_a_50mb_line_loads_with_bounded_memory(tmp_path):
    """Measured in a fresh process (its VmHWM): in this one, pytest's own earlier peak
    would hide any growth below it."""
    big = "y" * (50 * 1024 * 1024)
    path = write(tmp_path, HEADER + entry("a", None, big) + entry("b", "a"))
    code = f"""
def peak():
    with open("/proc/self/status") as status:
        return next(int(x.split()[1]) for x in status if x.startswith("VmHWM:")) // 1024
from journal import load
before = peak()
snap = load({str(path)!r})
print(len(snap.entries[0]["message"]["content"]), peak() - before)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    length, grown_mb = map(int, done.stdout.split())
    assert length == len(big)
    assert grown_mb < 400, f"peak grew by {grown_mb} MB for a 50 MB line"


def test_reader_never_raises_and_accounts_for_every_noise_line(tmp_path):
    import random

    rng = random.Random(7)
    for _ in range(30):
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        snap = load(write(tmp_path, HEADER + noise + b"\n" + entry("a", None)))
        flagged = {d.offset for d in snap.diagnostics}
        offset = len(HEADER)
        for raw in noise.split(b"\n"):
            blank = not raw.rstrip(b"\r").strip(b" \t")
            assert blank or offset in flagged, (offset, raw)
            offset += len(raw) + 1
        assert snap.entries[-1]["id"] == "a"


def test_resume_reports_torn_tail_and_reads_only_what_it_needs(tmp_path):
    lines = [HEADER] + [entry(f"{i:08x}", f"{i - 1:08x}" if i else None) for i in range(50)]
    path = write(tmp_path, b"".join(lines) + b'{"type":')
    snap = resume(path)
    assert [d.reason for d in snap.diagnostics] == ["torn_tail"]
    assert snap.entries[-1]["id"] == f"{49:08x}"
