"""`journal usage` and the price table: tokens and cost per session, model and day, each
rotated lineage counted once, costs recorded or computed, damaged files reported."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from corruption import gen_session_module, insert_lines, torn_tail
from third_party import pi_path

from journal import (
    JournalError,
    Session,
    canonical_model,
    lineage,
    load,
    load_prices,
    rotate,
    usage,
)
from journal.cli import main

ROOT = Path(__file__).resolve().parents[1]
DAY = 86_400_000
T0 = 1_779_926_400_000  # 2026-05-28 00:00 UTC


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def user(text: str, ts: int = T0) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


def reply(model: str, inp: int, out: int, cr: int = 0, cw: int = 0, *, cost: float | None,
          ts: int = T0) -> dict[str, Any]:
    usage_: dict[str, Any] = {"input": inp, "output": out, "cacheRead": cr, "cacheWrite": cw,
                              "totalTokens": inp + out + cr + cw}
    if cost is not None:
        usage_["cost"] = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                          "total": cost}
    return {"role": "assistant", "content": [{"type": "text", "text": "ok " + "y" * 3000}],
            "api": "anthropic-messages", "provider": "anthropic", "model": model,
            "usage": usage_, "stopReason": "stop", "timestamp": ts}


def oracle(paths: list[Path]) -> dict[str, float]:
    """Sums over the distinct assistant messages (by entry id) of the given files, read line
    by line with orjson: an independent count to check the library against."""
    seen: set[str] = set()
    sums = {"messages": 0, "input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0,
            "cost": 0.0}
    for path in paths:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        for line in data.splitlines()[1:]:
            entry = orjson.loads(line)
            message = entry.get("message") or {}
            if entry.get("id") in seen or message.get("role") != "assistant":
                continue
            seen.add(entry["id"])
            sums["messages"] += 1
            for key in ("input", "output", "cacheRead", "cacheWrite"):
                sums[key] += message["usage"][key]
            sums["cost"] += message["usage"]["cost"]["total"]
    return sums


def as_sums(row: dict[str, Any]) -> dict[str, float]:
    return {k: row[k] for k in ("messages", "input", "output", "cacheRead", "cacheWrite", "cost")}


def rotated_lineage(folder: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """A session rotated twice (gzip archives), each round with recorded replies on two
    models and two days; returns its files (oldest first) and every reply written."""
    written: list[dict[str, Any]] = []
    s = Session.create(folder, cwd="/proj")
    s.append_session_info("costly")
    path = s.path
    for round_ in range(3):
        for i in range(6):
            s.append_message(user(f"r{round_} q{i} " + "z" * 3000, T0 + round_ * DAY))
            model = "claude-sonnet-4-5" if i % 2 else "claude-haiku-4-5"
            message = reply(model, 1000 + i, 10 + round_, 7, 3, cost=0.01 * (i + 1),
                            ts=T0 + round_ * DAY + i)
            s.append_message(message)
            written.append(message)
        kept = s.entries[-4]["id"]  # the compaction keeps the last two turns
        s.append_compaction(f"summary {round_}", kept, 5000)
        s.append_message(user("after the compaction", T0 + round_ * DAY + 50))
        if round_ < 2:
            s.close()
            result = rotate(s.path)
            assert result.rotated and result.archive.endswith(".gz")
            s = Session.open(result.successor)
    s.close()
    files = lineage(path)
    assert len(files) == 3
    return files, written


# the library


def test_a_generated_session_sums_every_recorded_usage(tmp_path):
    path = tmp_path / "gen.jsonl"
    gen_session_module().generate(path, target_bytes=400_000, seed=7, branch_every=3,
                                  compaction_every_bytes=60_000)
    assert len(load(path).entries) > 100
    report = usage([path])
    expected = oracle([path])
    assert expected["messages"] > 20
    data = report.to_json("session")
    assert len(data["rows"]) == 1
    row = data["rows"][0]
    assert as_sums(row) == pytest.approx(expected)
    assert row["costSource"] == "recorded" and row["computedMessages"] == 0
    assert data["total"]["totalTokens"] == sum(expected[k] for k in
                                               ("input", "output", "cacheRead", "cacheWrite"))
    for by in ("model", "day"):  # every grouping adds up to the same total
        assert sum(t.cost for _, t in report.rows(by)) == pytest.approx(expected["cost"])


def test_a_rotated_lineage_counts_each_reply_once_however_it_is_named(tmp_path):
    files, written = rotated_lineage(tmp_path)
    archives = [Path(f) for f in files[:-1]]
    assert all(f.suffix == ".gz" for f in archives)
    expected = {"messages": len(written),
                "input": sum(m["usage"]["input"] for m in written),
                "output": sum(m["usage"]["output"] for m in written),
                "cacheRead": 7 * len(written), "cacheWrite": 3 * len(written),
                "cost": sum(m["usage"]["cost"]["total"] for m in written)}
    # each successor repeats kept replies of its predecessor: a sum over files counts twice
    naive = sum(oracle([Path(f)])["messages"] for f in files)
    assert naive > len(written)
    for named in ([files[-1]], [files[0]], [str(tmp_path)], [*files]):
        data = usage(named).to_json()
        assert len(data["rows"]) == 1, named
        row = data["rows"][0]
        assert as_sums(row) == pytest.approx(expected), named
        assert row["files"] == [os.path.realpath(f) for f in files]
        assert row["session"] == os.path.realpath(files[-1])
        assert row["name"] == "costly"
    by_day = usage([tmp_path]).rows("day")
    assert [day for day, _ in by_day] == ["2026-05-28", "2026-05-29", "2026-05-30"]
    assert [t.messages for _, t in by_day] == [6, 6, 6]
    by_model = dict(usage([tmp_path]).rows("model"))
    assert set(by_model) == {"claude-sonnet-4-5", "claude-haiku-4-5"}
    assert by_model["claude-sonnet-4-5"].messages == 9


def test_a_reply_without_a_recorded_cost_is_priced_from_the_table(tmp_path):
    with Session.create(tmp_path, cwd="/p") as s:
        s.append_message(user("a"))
        s.append_message(reply("claude-opus-4-5-20251101", 1_000_000, 100_000, 2_000_000,
                               400_000, cost=None))
        s.append_message(user("b"))
        # a zero cost for tokens the table can price is taken as "not recorded"
        s.append_message(reply("claude-sonnet-4-5", 1_000_000, 0, cost=0.0))
        s.append_message(user("c"))
        s.append_message(reply("claude-sonnet-4-5", 10, 10, cost=0.5))
        s.append_message(user("d"))
        s.append_message(reply("my-local-model", 5000, 50, cost=None))
    report = usage([tmp_path])
    models = dict(report.rows("model"))
    opus = models["claude-opus-4-5-20251101"]
    assert opus.cost == pytest.approx(5.0 + 2.5 + 1.0 + 2.5)  # $5 $25 $0.5 $6.25 per MTok
    assert (opus.cost_source, opus.computed, opus.computed_cost) == ("computed", 1, opus.cost)
    sonnet = models["claude-sonnet-4-5"]
    assert sonnet.cost == pytest.approx(3.0 + 0.5)
    assert sonnet.cost_source == "mixed" and sonnet.computed == 1
    assert sonnet.recorded_cost == pytest.approx(0.5)
    local = models["my-local-model"]
    assert (local.cost, local.unpriced, local.cost_source) == (0.0, 1, "none")
    assert report.unpriced_models == ["my-local-model"]
    assert report.total.cost == pytest.approx(11.0 + 3.5)


def test_the_bundled_price_table_has_its_date_source_and_current_models():
    table = load_prices()
    assert table.as_of and "Anthropic" in table.source
    assert table.path.endswith(os.path.join("journal", "data", "prices.json"))
    for model, rates in {"claude-opus-4-5-20251101": (5.0, 25.0, 0.5, 6.25),
                         "claude-opus-4-1-20250805": (15.0, 75.0, 1.5, 18.75),
                         "claude-sonnet-4-5": (3.0, 15.0, 0.3, 3.75),
                         "claude-haiku-4-5-20251001": (1.0, 5.0, 0.1, 1.25),
                         "anthropic/claude-sonnet-4.5": (3.0, 15.0, 0.3, 3.75),
                         "us.anthropic.claude-haiku-4-5-20251001-v1:0": (1.0, 5.0, 0.1, 1.25),
                         # checked against the published pages on the table's date
                         "claude-opus-5-5": (4.0, 20.0, 0.2, 5.0),
                         "claude-opus-5": (5.0, 25.0, 0.5, 6.25),
                         "claude-opus-4-8": (5.0, 25.0, 0.5, 6.25),
                         "claude-fable-5-1": (10.0, 50.0, 0.25, 12.5),
                         "claude-fable-5": (10.0, 50.0, 1.0, 12.5),
                         "claude-sonnet-5-5": (2.0, 10.0, 0.1, 2.5),
                         "claude-sonnet-5": (2.0, 10.0, 0.2, 2.5),
                         "claude-haiku-5-5": (0.1, 0.5, 0.01, 0.125),
                         }.items():
        price = table.price_for(model)
        assert price is not None, model
        assert (price.input, price.output, price.cache_read, price.cache_write) == rates, model
    assert table.price_for("gpt-5") is None
    assert canonical_model("anthropic/Claude-Sonnet-4.5") == "claude-sonnet-4-5"


def write_prices(path: Path, output: float) -> Path:
    path.write_bytes(orjson.dumps({"asOf": "2030-01-01", "source": "a test", "models": [
        {"prefix": "claude-sonnet-4", "input": 0, "output": output, "cacheRead": 0,
         "cacheWrite": 0}]}))
    return path


def test_a_price_file_replaces_the_bundled_one_by_argument_or_environment(tmp_path,
                                                                          monkeypatch):
    mine = write_prices(tmp_path / "mine.json", 1_000_000.0)  # $1 per output token
    assert load_prices(mine).price_for("claude-sonnet-4-5").output == 1_000_000.0
    monkeypatch.setenv("JOURNAL_PRICES", str(mine))
    assert load_prices().path == str(mine)
    assert load_prices().price_for("claude-haiku-4-5") is None
    # an explicit file wins over the environment
    other = write_prices(tmp_path / "other.json", 2_000_000.0)
    assert load_prices(other).price_for("claude-sonnet-4-5").output == 2_000_000.0


@pytest.mark.parametrize("content, says", [
    (b"{not json", "not valid JSON"),
    (b"[]", "not a price table"),
    (b'{"source": "x", "models": []}', "'asOf'"),
    (b'{"asOf": "x", "models": [{"prefix": "c", "input": "3"}]}', "'input' must be a number"),
])
def test_a_bad_price_file_is_one_clear_error(tmp_path, capsys, content, says):
    bad = tmp_path / "prices.json"
    bad.write_bytes(content)
    with pytest.raises(JournalError, match=says):
        load_prices(bad)
    code, out, err = run(capsys, "usage", str(tmp_path), "--prices", str(bad))
    assert code == 2 and out == ""
    assert err.startswith(f"Error: {bad}: ") and says in err and "Traceback" not in err


# damaged files


def test_damaged_and_foreign_files_are_reported_and_the_rest_counted(tmp_path, capsys):
    gen = gen_session_module()
    good = tmp_path / "good.jsonl"
    gen.generate(good, target_bytes=150_000, seed=3)
    torn = tmp_path / "torn.jsonl"
    gen.generate(torn, target_bytes=150_000, seed=4)
    torn.write_bytes(torn_tail(insert_lines(torn.read_bytes(), 5, b'{"type": "mess'), 40))
    (tmp_path / "notes.jsonl").write_bytes(b"hello\nworld\n")
    (tmp_path / "archive").mkdir()
    (tmp_path / "archive" / "broken.jsonl.gz").write_bytes(b"\x1f\x8bnot gzip at all")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    report = usage([tmp_path, tmp_path / "missing.jsonl"])
    warned = {Path(w.path).name: w.message for w in report.warnings}
    assert "unreadable line" in warned["torn.jsonl"] and "journal repair" in warned["torn.jsonl"]
    assert "not counted" in warned["notes.jsonl"]
    assert "gzip" in warned["broken.jsonl.gz"]
    assert "not counted" in warned["empty.jsonl"]
    assert warned["missing.jsonl"] == "no such file or folder"
    rows = {Path(p).name: t for p, t in report.rows("session")}
    assert rows["good.jsonl"].messages == oracle([good])["messages"]
    assert rows["torn.jsonl"].messages > 0  # counted as far as it can be read
    assert sorted(rows) == ["good.jsonl", "torn.jsonl"]  # what is no session is no row
    code, out, err = run(capsys, "usage", str(tmp_path), "--json")
    assert code == 0 and "Traceback" not in err
    assert "Warning: " in err and "notes.jsonl" in err
    assert orjson.loads(out)["total"]["messages"] == report.total.messages


# pi's own files


def test_pi_fixture_usage_matches_its_recorded_usage():
    path = pi_path("large-session.jsonl")
    seen_lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    replies = [e["message"]["usage"] for e in seen_lines
               if e.get("type") == "message" and e["message"].get("role") == "assistant"]
    data = usage([path]).to_json("model")
    assert data["total"]["messages"] == len(replies) > 100
    assert data["total"]["cacheWrite"] == sum(u["cacheWrite"] for u in replies)
    assert data["total"]["cost"] == pytest.approx(sum(u["cost"]["total"] for u in replies))
    models = {e["message"]["model"] for e in seen_lines
              if e.get("type") == "message" and e["message"].get("role") == "assistant"}
    assert {r["model"] for r in data["rows"]} == models
    assert data["total"]["costSource"] == "recorded"


# the command


def test_the_command_as_people_run_it(tmp_path):
    files, written = rotated_lineage(tmp_path / "sessions")
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.pop("JOURNAL_PRICES", None)

    def journal(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "journal.cli", "usage", *argv],
                              capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=60)

    proc = journal("sessions", "--by", "day", "--json")
    assert proc.returncode == 0, proc.stderr
    data = orjson.loads(proc.stdout)
    assert [r["day"] for r in data["rows"]] == ["2026-05-28", "2026-05-29", "2026-05-30"]
    assert data["total"]["messages"] == len(written)
    assert data["sessions"] == 1 and data["files"] == 3
    assert data["prices"]["asOf"] == load_prices().as_of
    proc = journal(files[0])  # an archive names its whole lineage
    assert proc.returncode == 0, proc.stderr
    assert "total" not in proc.stdout  # one row, no total line
    assert "1 session(s) in 3 file(s)" in proc.stderr  # the notes: not rows of a pipe
    total = f"{sum(m['usage']['cost']['total'] for m in written):,.4f}"
    assert total in proc.stdout and "recorded" in proc.stdout
    proc = journal("sessions", "--by", "model")
    assert "claude-haiku-4-5" in proc.stdout and "total" in proc.stdout
    proc = journal("sessions", "--by", "week")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_the_agent_prices_replies_from_journals_table(tmp_path, monkeypatch):
    from agent.models.anthropic import AnthropicModel, price_for

    table = load_prices()
    for model in ("claude-opus-4-5", "claude-opus-4-1-20250805", "claude-sonnet-4-6"):
        ours = table.price_for(model)
        theirs = price_for(model)
        assert theirs is not None and ours is not None
        assert (theirs.input, theirs.output, theirs.cache_read, theirs.cache_write) == (
            ours.input, ours.output, ours.cache_read, ours.cache_write)
    monkeypatch.setenv("JOURNAL_PRICES", str(write_prices(tmp_path / "p.json", 42.0)))
    model = AnthropicModel("claude-sonnet-4-5", client=object())  # type: ignore[arg-type]
    assert model.price is not None and model.price.output == 42.0


def test_with_no_path_usage_reads_the_sessions_folder_every_command_reads(
        tmp_path, capsys, monkeypatch):
    """No path means `$JOURNAL_SESSIONS_DIR` (else ./sessions), as for ls and search."""
    folder = tmp_path / "kept here"
    folder.mkdir()
    files, written = rotated_lineage(folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(folder))
    code, out, _ = run(capsys, "usage", "--json")
    assert code == 0
    rows = orjson.loads(out)["rows"]
    assert [row["session"] for row in rows] == [os.path.realpath(files[-1])]
    assert rows[0]["messages"] == len(written)


def test_usage_of_a_path_that_does_not_exist_is_an_error(tmp_path, capsys):
    gen = gen_session_module()
    good = tmp_path / "good.jsonl"
    gen.generate(good, target_bytes=20_000, seed=5)
    code, out, err = run(capsys, "usage", str(good), str(tmp_path / "missing.jsonl"))
    assert code == 2 and out == ""
    missing = tmp_path / "missing.jsonl"
    assert err.strip().splitlines()[-1] == f"Error: {missing}: no such file or folder"


def test_usage_where_the_default_folder_does_not_exist_is_an_error_as_for_ls_and_search(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOURNAL_SESSIONS_DIR", raising=False)
    for argv in (["usage"], ["ls"], ["search", "anything"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "", argv
        assert err.strip().endswith("sessions: no such file or folder"), (argv, err)
