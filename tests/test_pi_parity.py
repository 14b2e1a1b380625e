"""journal's context projection must equal pi's (bench/parity.py, run against the real pi).

Skipped when node or the pi package is not installed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_module():
    name = "bench_parity"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "parity.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


parity = _load_module()


@pytest.fixture(scope="module")
def pi():
    node = parity.find_node()
    pi_dir = parity.find_pi_dir()
    missing = parity.pi_missing(node, pi_dir)
    if missing:
        pytest.skip(f"pi parity needs node and pi-coding-agent: {missing}")
    return node, pi_dir


def _assert_same_as_pi(files: list[Path], node: str, pi_dir: str) -> None:
    results = parity.check_files(files, node, pi_dir)
    failed = [r for r in results if not r.equal]
    assert not failed, (
        "journal's context differs from pi's:\n"
        + parity.format_table(results) + "\n" + parity.format_problems(results)
    )


def test_parity_with_pi(pi, tmp_path: Path) -> None:
    """Generated sessions and hand-built edge files: needs no third-party session file."""
    files = parity.build_file_set(tmp_path, quick=True, fixtures=False)
    assert len(files) == len(parity.QUICK_GENERATED) + len(parity.EDGE_CASES)
    _assert_same_as_pi(files, *pi)


def test_parity_with_pi_on_the_real_pi_files(pi) -> None:
    missing = parity.fixtures_missing()
    if missing is not None:
        pytest.skip(missing)
    files = parity.fixture_files()
    assert len(files) == 3
    _assert_same_as_pi(files, *pi)


def test_generated_sessions_exercise_the_tree(tmp_path: Path) -> None:
    """The quick generated sessions have what the parity test is meant to cover."""
    from journal.snapshot import load

    for path in parity.write_generated(tmp_path, parity.QUICK_GENERATED):
        kinds: dict[str, int] = {}
        for entry in load(path).entries:
            kinds[entry["type"]] = kinds.get(entry["type"], 0) + 1
        assert kinds.get("compaction", 0) >= 2, (path.name, kinds)
        assert kinds.get("branch_summary", 0) >= 1, (path.name, kinds)
        assert kinds.get("label", 0) >= 1, (path.name, kinds)


def test_edge_files_are_valid_for_journal(tmp_path: Path) -> None:
    """The hand-built edge files are well-formed: journal reads them without diagnostics."""
    from journal.snapshot import load

    for path in parity.write_edge_files(tmp_path):
        snap = load(path)
        assert snap.diagnostics == [], (path.name, snap.diagnostics)
        assert snap.version == 3


def test_compare_reports_the_first_differing_message() -> None:
    pi = {"messages": [{"role": "user", "content": "a", "timestamp": 1},
                       {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
                       {"role": "user", "content": "c"}],
          "model": {"provider": "p", "modelId": "m"}, "thinkingLevel": "off", "leafId": "e1"}
    ours = {"messages": [{"role": "user", "content": "a", "timestamp": 1.0},
                         {"role": "assistant", "content": [{"type": "text", "text": "y"}]},
                         {"role": "user", "content": "different too"}],
            "model": {"provider": "p", "modelId": "m"}, "thinkingLevel": "off", "leafId": "e1"}
    result = parity.compare("f", Path("f.jsonl"), pi, ours, version=3)
    assert not result.equal
    assert result.first_diff == 1
    assert any('content[0].text: pi="x" ours="y"' in p for p in result.problems)

    same = parity.compare("f", Path("f.jsonl"), pi, pi, version=3)
    assert same.equal and same.first_diff is None


def test_compare_absent_vs_null_and_lengths() -> None:
    pi = {"messages": [{"role": "custom", "timestamp": 0}], "model": None,
          "leafId": "b"}
    ours = {"messages": [{"role": "custom", "display": None, "timestamp": 0},
                         {"role": "user", "content": "extra"}],
            "model": None, "thinkingLevel": "off", "leafId": "a"}
    result = parity.compare("f", Path("f.jsonl"), pi, ours, version=3)
    text = "\n".join(result.problems)
    assert result.first_diff == 0
    assert "display: pi=<absent> ours=null" in text
    assert "thinkingLevel: pi=<absent>" in text
    assert 'leafId: pi="b" ours="a"' in text
    # v1 files get random ids in pi: their leafId is not compared
    v1 = parity.compare("f", Path("f.jsonl"), {**ours, "leafId": "zz"}, ours, version=1)
    assert v1.equal


def test_pi_keeps_ids() -> None:
    assert parity.pi_keeps_ids({"version": 3})
    assert parity.pi_keeps_ids({"version": "3"})
    assert parity.pi_keeps_ids({"version": 4})
    assert not parity.pi_keeps_ids({})
    assert not parity.pi_keeps_ids({"version": 2})
    assert not parity.pi_keeps_ids({"version": "abc"})
    assert not parity.pi_keeps_ids(None)


def test_pi_opens_a_rotated_successor_and_builds_the_same_context(pi, tmp_path: Path) -> None:
    """A successor written by rotation is a file pi loads, with the context we give."""
    from journal import rotate

    node, pi_dir = pi
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (tmp_path / "gen").mkdir()
    source = parity.write_generated(tmp_path / "gen", ["gen-s5-6m-tail.jsonl"])[0]
    original = sessions / source.name
    original.write_bytes(source.read_bytes())
    before, _, _, _ = parity.run_ours(original)
    result = rotate(str(original), compress=False)
    assert result.rotated
    successor = Path(result.successor)
    ours, _, diagnostics, _ = parity.run_ours(successor)
    assert diagnostics == 0
    (theirs,) = parity.run_pi([successor], node, pi_dir)
    assert theirs["messages"] == ours["messages"] == before["messages"]
    assert theirs["model"] == ours["model"] and theirs["thinkingLevel"] == ours["thinkingLevel"]
    assert theirs["leafId"] == ours["leafId"]
