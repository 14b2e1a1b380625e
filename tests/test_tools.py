"""Tests of the workspace confinement, the file tools, grep and the tool registry."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from tools import (
    EditTool,
    GrepTool,
    LsTool,
    ReadTool,
    Workspace,
    WorkspaceEscape,
    WriteTool,
    default_tools,
    run_tool,
    tool_schemas,
)

# --- workspace confinement ----------------------------------------------------------------


def test_resolve_keeps_paths_inside(ws: Workspace) -> None:
    (ws.root / "sub").mkdir()
    assert ws.resolve("a.txt") == ws.root / "a.txt"
    assert ws.resolve("sub/../a.txt") == ws.root / "a.txt"
    assert ws.resolve(".") == ws.root
    assert ws.resolve(str(ws.root / "sub" / "b")) == ws.root / "sub" / "b"
    assert ws.relative(ws.resolve("sub/b")) == "sub/b"
    assert ws.relative(ws.root) == "."


@pytest.mark.parametrize("path", ["..", "../outside/secret.txt", "sub/../../x", "a/../../.."])
def test_resolve_refuses_dotdot(ws: Workspace, path: str) -> None:
    with pytest.raises(WorkspaceEscape):
        ws.resolve(path)


def test_resolve_refuses_absolute_path_outside(ws: Workspace, outside: Path) -> None:
    with pytest.raises(WorkspaceEscape):
        ws.resolve(str(outside / "secret.txt"))
    with pytest.raises(WorkspaceEscape):
        ws.resolve("/etc/passwd")


def test_resolve_refuses_sibling_with_common_prefix(ws: Workspace) -> None:
    sibling = ws.root.parent / (ws.root.name + "2")
    sibling.mkdir()
    with pytest.raises(WorkspaceEscape):
        ws.resolve(str(sibling / "f"))


def test_resolve_refuses_symlink_outside(ws: Workspace, outside: Path) -> None:
    (ws.root / "link_dir").symlink_to(outside)
    (ws.root / "link_file").symlink_to(outside / "secret.txt")
    (ws.root / "dangling").symlink_to(outside / "not-yet")
    for path in ["link_dir", "link_dir/secret.txt", "link_file", "dangling"]:
        with pytest.raises(WorkspaceEscape):
            ws.resolve(path)


def test_resolve_allows_symlink_inside(ws: Workspace) -> None:
    (ws.root / "real").mkdir()
    (ws.root / "real" / "f.txt").write_text("inside\n")
    (ws.root / "alias").symlink_to(ws.root / "real")
    assert ws.resolve("alias/f.txt") == ws.root / "real" / "f.txt"
    assert ReadTool(ws).run({"path": "alias/f.txt"}).content == "inside\n"


def test_workspace_root_given_through_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real_root"
    real.mkdir()
    (tmp_path / "root_link").symlink_to(real)
    ws = Workspace(tmp_path / "root_link")
    assert ws.root == real
    assert ws.resolve("x") == real / "x"


def test_tools_turn_escapes_into_error_results(ws: Workspace, outside: Path) -> None:
    (ws.root / "link").symlink_to(outside)
    cases = [
        (ReadTool(ws), {"path": "../outside/secret.txt"}),
        (ReadTool(ws), {"path": "link/secret.txt"}),
        (WriteTool(ws), {"path": str(outside / "new.txt"), "content": "x"}),
        (WriteTool(ws), {"path": "link/new.txt", "content": "x"}),
        (EditTool(ws), {"path": "link/secret.txt", "old_text": "top", "new_text": "no"}),
        (LsTool(ws), {"path": ".."}),
        (GrepTool(ws), {"pattern": "secret", "path": str(outside)}),
    ]
    for tool, args in cases:
        result = tool.run(args)
        assert result.is_error, (tool.name, args)
        assert "outside the workspace" in result.content
        assert "top secret" not in result.content
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret\n"


# --- read ---------------------------------------------------------------------------------


def _numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


def test_read_whole_file(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text(_numbered(3))
    result = ReadTool(ws).run({"path": "f.txt"})
    assert not result.is_error
    assert result.content == _numbered(3)
    assert result.details["total_lines"] == 3
    assert result.details["truncated"] is False


def test_read_offset_and_limit(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text(_numbered(100))
    result = ReadTool(ws).run({"path": "f.txt", "offset": 10, "limit": 5})
    body, note = result.content.split("\n\n")
    assert body == "".join(f"line {i}\n" for i in range(10, 15)).rstrip("\n")
    assert note == "[showing lines 10-14 of 100; use offset=15 to continue]"
    assert (result.details["start_line"], result.details["end_line"]) == (10, 14)
    assert result.details["truncated"] is False


def test_read_offset_to_end_has_no_note(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text(_numbered(20))
    result = ReadTool(ws).run({"path": "f.txt", "offset": 18})
    assert result.content == "line 18\nline 19\nline 20\n"


def test_read_line_cap(ws: Workspace) -> None:
    (ws.root / "big.txt").write_text(_numbered(5234))
    result = ReadTool(ws).run({"path": "big.txt"})
    assert not result.is_error
    assert result.content.startswith("line 1\n")
    assert "line 2000\n" in result.content
    assert "line 2001" not in result.content
    assert result.content.endswith(
        "\n[cut: showing lines 1-2000 of 5234; use offset=2001 to continue]"
    )
    assert result.details["truncated"] is True
    follow = ReadTool(ws).run({"path": "big.txt", "offset": 2001})
    assert follow.content.startswith("line 2001\n")
    assert "use offset=4001 to continue" in follow.content


def test_read_char_cap(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text("".join(f"{i:029d}\n" for i in range(10)))
    result = ReadTool(ws, max_chars=100).run({"path": "f.txt"})
    assert result.details["truncated"] is True
    assert result.details["end_line"] == 3
    assert len(result.content.split("\n\n")[0]) <= 100
    assert "[cut: showing lines 1-3 of 10; use offset=4 to continue]" in result.content


def test_read_cuts_a_single_overlong_line(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text("x" * 500 + "\nshort\n")
    result = ReadTool(ws, max_chars=100).run({"path": "f.txt"})
    assert result.content.startswith("x" * 100 + "\n")
    assert "x" * 101 not in result.content
    assert "line 1 is longer than 100 characters" in result.content


def test_read_errors(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text(_numbered(3))
    (ws.root / "d").mkdir()
    (ws.root / "bin").write_bytes(b"\x7fELF\x00\x01\x02")
    tool = ReadTool(ws)
    cases = {
        "missing.txt": "file not found: missing.txt",
        "d": "is a directory",
        "bin": "binary",
    }
    for path, message in cases.items():
        result = tool.run({"path": path})
        assert result.is_error and message in result.content, path
    past = tool.run({"path": "f.txt", "offset": 4})
    assert past.is_error and "beyond the end" in past.content
    assert tool.run({"path": "f.txt", "offset": 0}).is_error


def test_read_empty_file(ws: Workspace) -> None:
    (ws.root / "e.txt").write_text("")
    result = ReadTool(ws).run({"path": "e.txt"})
    assert not result.is_error
    assert result.details["total_lines"] == 0


# --- write --------------------------------------------------------------------------------


def test_write_read_round_trip(ws: Workspace) -> None:
    text = "héllo\r\nwörld\n\tindented\nno newline at end"
    result = WriteTool(ws).run({"path": "deep/er/f.txt", "content": text})
    assert not result.is_error
    assert result.details["created"] is True
    assert result.details["bytes"] == len(text.encode("utf-8"))
    assert (ws.root / "deep" / "er" / "f.txt").read_bytes() == text.encode("utf-8")
    assert ReadTool(ws).run({"path": "deep/er/f.txt"}).content == text


def test_write_overwrites(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text("old content that is long\n")
    result = WriteTool(ws).run({"path": "f.txt", "content": "new\n"})
    assert result.details["created"] is False
    assert (ws.root / "f.txt").read_text() == "new\n"


def test_write_to_directory_is_an_error(ws: Workspace) -> None:
    (ws.root / "d").mkdir()
    result = WriteTool(ws).run({"path": "d", "content": "x"})
    assert result.is_error and "is a directory" in result.content


# --- edit ---------------------------------------------------------------------------------

SOURCE = "def f():\n    return 1\n\n\ndef g():\n    return 1\n"


def test_edit_success(ws: Workspace) -> None:
    (ws.root / "m.py").write_text(SOURCE)
    result = EditTool(ws).run(
        {"path": "m.py", "old_text": "def g():\n    return 1", "new_text": "def g():\n    return 2"}
    )
    assert not result.is_error, result.content
    assert result.details["line"] == 5
    assert (ws.root / "m.py").read_text() == "def f():\n    return 1\n\n\ndef g():\n    return 2\n"


def test_edit_zero_matches_is_a_clear_error(ws: Workspace) -> None:
    (ws.root / "m.py").write_text(SOURCE)
    before = (ws.root / "m.py").read_bytes()
    result = EditTool(ws).run({"path": "m.py", "old_text": "return  1", "new_text": "return 3"})
    assert result.is_error
    assert "not found" in result.content and "m.py" in result.content
    assert result.details["matches"] == 0
    assert (ws.root / "m.py").read_bytes() == before


def test_edit_several_matches_is_a_clear_error(ws: Workspace) -> None:
    (ws.root / "m.py").write_text(SOURCE)
    before = (ws.root / "m.py").read_bytes()
    result = EditTool(ws).run({"path": "m.py", "old_text": "return 1", "new_text": "return 3"})
    assert result.is_error
    assert "matches 2 times" in result.content
    assert "lines 2, 6" in result.content
    assert result.details["matches"] == 2
    assert (ws.root / "m.py").read_bytes() == before


def test_edit_counts_overlapping_matches(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text("aaa\n")
    result = EditTool(ws).run({"path": "f.txt", "old_text": "aa", "new_text": "b"})
    assert result.is_error and "matches 2 times" in result.content
    assert (ws.root / "f.txt").read_text() == "aaa\n"


def test_edit_keeps_crlf_and_refuses_non_utf8(ws: Workspace) -> None:
    (ws.root / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    assert not EditTool(ws).run({"path": "w.txt", "old_text": "two", "new_text": "2"}).is_error
    assert (ws.root / "w.txt").read_bytes() == b"one\r\n2\r\n"

    latin = b"caf\xe9 one\n"
    (ws.root / "l.txt").write_bytes(latin)
    result = EditTool(ws).run({"path": "l.txt", "old_text": "one", "new_text": "two"})
    assert result.is_error and "UTF-8" in result.content
    assert (ws.root / "l.txt").read_bytes() == latin


def test_edit_missing_file_and_empty_old_text(ws: Workspace) -> None:
    assert (
        "file not found"
        in EditTool(ws).run({"path": "nope.py", "old_text": "a", "new_text": "b"}).content
    )
    (ws.root / "f.txt").write_text("abc")
    result = EditTool(ws).run({"path": "f.txt", "old_text": "", "new_text": "b"})
    assert result.is_error
    assert (ws.root / "f.txt").read_text() == "abc"


# --- ls -----------------------------------------------------------------------------------


def test_ls_sorted_with_dir_markers(ws: Workspace) -> None:
    (ws.root / "b.txt").write_text("")
    (ws.root / "a_dir").mkdir()
    (ws.root / "c").mkdir()
    (ws.root / ".hidden").write_text("")
    (ws.root / "a_dir" / "inner.txt").write_text("")
    result = LsTool(ws).run({})
    assert result.content == ".hidden\na_dir/\nb.txt\nc/"
    assert result.details["entries"] == 4
    assert LsTool(ws).run({"path": "a_dir"}).content == "inner.txt"
    assert LsTool(ws).run({"path": "c"}).content == "(empty directory)"


def test_ls_cap_and_errors(ws: Workspace) -> None:
    for i in range(5):
        (ws.root / f"f{i}").write_text("")
    result = LsTool(ws, max_entries=3).run({"path": "."})
    assert result.content.splitlines()[:3] == ["f0", "f1", "f2"]
    assert "f3" not in result.content
    assert result.details["truncated"] is True
    assert LsTool(ws).run({"path": "f0"}).is_error
    assert LsTool(ws).run({"path": "missing"}).is_error


# --- grep ---------------------------------------------------------------------------------


@pytest.fixture
def tree(ws: Workspace) -> Workspace:
    (ws.root / "pkg").mkdir()
    (ws.root / "pkg" / "a.py").write_text("import os\n\ndef alpha(x):\n    return x\n")
    (ws.root / "pkg" / "b.py").write_text("def beta():\n    pass\nDEF GAMMA\n")
    (ws.root / "notes.txt").write_text("def in a text file()\n")
    (ws.root / ".git").mkdir()
    (ws.root / ".git" / "config.py").write_text("def hidden():\n")
    (ws.root / "blob.py").write_bytes(b"def binary():\x00\n")
    return ws


def test_grep_regex_and_glob(tree: Workspace) -> None:
    result = GrepTool(tree).run({"pattern": r"def \w+\(", "glob": "*.py"})
    assert not result.is_error
    assert result.content.splitlines() == [
        "pkg/a.py:3: def alpha(x):",
        "pkg/b.py:1: def beta():",
    ]
    assert result.details["matches"] == 2


def test_grep_without_glob_searches_every_text_file(tree: Workspace) -> None:
    result = GrepTool(tree).run({"pattern": r"^def "})
    assert result.content.splitlines() == [
        "notes.txt:1: def in a text file()",
        "pkg/a.py:3: def alpha(x):",
        "pkg/b.py:1: def beta():",
    ]


def test_grep_path_ignore_case_and_no_match(tree: Workspace) -> None:
    result = GrepTool(tree).run({"pattern": "gamma", "path": "pkg", "ignore_case": True})
    assert result.content == "pkg/b.py:3: DEF GAMMA"
    assert GrepTool(tree).run({"pattern": "gamma", "path": "pkg"}).content == "no matches"
    single = GrepTool(tree).run({"pattern": "return", "path": "pkg/a.py"})
    assert single.content == "pkg/a.py:4:     return x"


def test_grep_invalid_regex_is_an_error(tree: Workspace) -> None:
    result = GrepTool(tree).run({"pattern": "def (unclosed"})
    assert result.is_error and "invalid regular expression" in result.content


def test_grep_cap(ws: Workspace) -> None:
    (ws.root / "many.txt").write_text("hit\n" * 50)
    result = GrepTool(ws, max_matches=5).run({"pattern": "hit"})
    lines = result.content.splitlines()
    assert lines[:5] == [f"many.txt:{i}: hit" for i in range(1, 6)]
    assert len(lines) == 6 and lines[5].startswith("[cut: stopped after 5 matches")
    assert result.details["truncated"] is True


def test_grep_skips_symlinks_out_of_workspace(ws: Workspace, outside: Path) -> None:
    (ws.root / "leak.txt").symlink_to(outside / "secret.txt")
    (ws.root / "leakdir").symlink_to(outside)
    (ws.root / "own.txt").write_text("secret but mine\n")
    result = GrepTool(ws).run({"pattern": "secret"})
    assert result.content == "own.txt:1: secret but mine"


# --- registry, arguments and schemas ------------------------------------------------------


def test_run_tool_dispatches_by_name(ws: Workspace) -> None:
    tools = default_tools(ws)
    assert not run_tool(tools, "write", {"path": "x.txt", "content": "hi\n"}).is_error
    assert run_tool(tools, "read", {"path": "x.txt"}).content == "hi\n"
    by_name = {tool.name: tool for tool in tools}
    assert run_tool(by_name, "ls", {}).content == "x.txt"


def test_run_tool_unknown_name(ws: Workspace) -> None:
    result = run_tool(default_tools(ws), "rm_rf", {"path": "."})
    assert result.is_error
    assert "unknown tool 'rm_rf'" in result.content
    assert "read" in result.content and "bash" in result.content


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "missing required argument(s): path"),
        ({"path": 3}, "path must be a string"),
        ({"path": "f.txt", "offset": "2"}, "offset must be an integer"),
        ({"path": "f.txt", "offset": True}, "offset must be an integer"),
        ({"path": "f.txt", "limit": 0}, "limit must be >= 1"),
        ({"path": "f.txt", "paht": "x"}, "unexpected argument(s): paht"),
        (["f.txt"], "arguments must be a JSON object"),
    ],
)
def test_bad_arguments_are_error_results(ws: Workspace, args: object, message: str) -> None:
    (ws.root / "f.txt").write_text("x\n")
    result = ReadTool(ws).run(args)  # type: ignore[arg-type]
    assert result.is_error
    assert message in result.content


def test_null_optional_argument_counts_as_absent(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text("x\n")
    assert ReadTool(ws).run({"path": "f.txt", "limit": None}).content == "x\n"
    assert ReadTool(ws).run({"path": "f.txt", "offset": 1.0}).content == "x\n"


def test_schema_shape_of_every_tool(ws: Workspace) -> None:
    schemas = tool_schemas(default_tools(ws))
    assert sorted(s["name"] for s in schemas) == ["bash", "edit", "grep", "ls", "read", "write"]
    json.dumps(schemas)
    for schema in schemas:
        assert set(schema) == {"name", "description", "input_schema"}
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", schema["name"])
        assert isinstance(schema["description"], str) and len(schema["description"]) > 20
        input_schema = schema["input_schema"]
        assert input_schema["type"] == "object"
        properties = input_schema["properties"]
        assert properties, schema["name"]
        assert set(input_schema.get("required", [])) <= set(properties)
        for name, prop in properties.items():
            assert prop["type"] in {"string", "integer", "number", "boolean"}, name
            assert prop.get("description"), (schema["name"], name)


def test_schema_is_a_copy(ws: Workspace) -> None:
    tool = ReadTool(ws)
    tool.schema()["input_schema"]["properties"].clear()
    assert "path" in tool.schema()["input_schema"]["properties"]


def test_tools_package_imports_neither_journal_nor_agent() -> None:
    package = Path(__file__).resolve().parent.parent / "tools"
    sources = sorted(package.glob("*.py"))
    assert sources
    for source in sources:
        tree = ast.parse(source.read_text(), filename=str(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                roots = [(node.module or "").split(".")[0]]
            else:
                continue
            assert not {"journal", "agent"} & set(roots), f"{source.name}: {ast.dump(node)}"


def test_os_errors_become_error_results(ws: Workspace) -> None:
    (ws.root / "f.txt").write_text("x")
    result = WriteTool(ws).run({"path": "f.txt/child.txt", "content": "y"})
    assert result.is_error
    assert result.content.startswith("write: ")
    assert (ws.root / "f.txt").read_text() == "x"
