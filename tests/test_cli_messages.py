"""What the commands say where a newcomer found them wrong or unclear: each error names what
the argument is and what to do, and output to a pipe or a script is what such a reader
takes (docs/cli.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from journal import Session
from journal.cli import main


def session_file(folder: Path, text: str = "hello") -> str:
    """A session file in `folder` holding one user message."""
    folder.mkdir(parents=True, exist_ok=True)
    with Session.create(str(folder), cwd="/w") as session:
        session.append_message({"role": "user", "content": text, "timestamp": 1})
        return session.path


def last_error(err: str) -> str:
    return err.strip().splitlines()[-1]


def test_a_pull_into_a_session_file_says_it_is_a_file_and_pull_writes_into_a_folder(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It said `Error: FILE: File exists`, from the folder it tried to make."""
    live = session_file(tmp_path / "files")
    assert main(["push", live, pg_url]) == 0
    before = sorted(p.name for p in (tmp_path / "files").iterdir())
    capsys.readouterr()
    for target in (live, f"{live}/pulled"):
        assert main(["pull", pg_url, target]) == 2
        assert last_error(capsys.readouterr().err) == (
            f"Error: {live}: is a file, not a folder; a pull writes into a folder (made if "
            "missing): name one; nothing was written")
        assert sorted(p.name for p in (tmp_path / "files").iterdir()) == before


DATABASE = "postgresql://nobody@127.0.0.1:1/nodb"


@pytest.mark.parametrize("command", [["prune", "--older-than", "1d"], ["import"]],
                         ids=lambda argv: argv[0])
@pytest.mark.parametrize(("target", "what"), [
    ("pg:", "names a database (the one JOURNAL_DATABASE_URL names), not a file or folder"),
    (DATABASE, "names a database, not a file or folder"),
    ("pg:abc", "names a session in a database, not a file"),
    (f"{DATABASE}?session=abc", "names a session in a database, not a file"),
])
def test_a_files_only_command_says_whether_it_was_given_a_database_or_a_session(
        command: list[str], target: str, what: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`journal prune pg:` called the database `pg:` names 'a database session'."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JOURNAL_DATABASE_URL", DATABASE)
    assert main([command[0], target, *command[1:]]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"Error: {target}: {what}; journal {command[0]} works on "
                                 "session files only (see docs/postgres.md)\n")
    assert list(tmp_path.iterdir()) == []


def test_lineage_of_the_default_database_says_how_to_name_one_of_its_sessions(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """It said to give `?session=<id>`, which makes no session name of `pg:`."""
    monkeypatch.setenv("JOURNAL_DATABASE_URL", DATABASE)
    assert main(["lineage", "pg:"]) == 2
    assert capsys.readouterr().err == (
        "Error: pg:: names a database, not a session: name one of its sessions, pg:<id> "
        "(`journal ls pg:` lists them)\n")


def test_a_role_without_grants_is_named_and_sent_to_the_grants_section(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every command said 'cannot check the journal schema: permission denied for schema
    journal', naming neither the role nor where its grants are said."""
    import os

    import psycopg
    from pg_server import fresh_database

    from journal.pg.connect import connect

    role = f"nogrants_{os.getpid()}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        try:
            admin.execute(f'CREATE ROLE "{role}" LOGIN'.encode())
        except psycopg.errors.DuplicateObject:
            pass  # made by an earlier test of this run: roles are the server's
    connect(pg_url).close()  # the journal schema, made by its owner
    as_role = pg_url.replace("postgresql://postgres@", f"postgresql://{role}@")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "postgres.md").read_text()
    assert "\n## Roles and grants\n" in doc
    for argv in (["ls", as_role], ["new", as_role], ["pull", as_role, str(tmp_path / "out")]):
        assert main(argv) == 2
        assert last_error(capsys.readouterr().err) == (
            f"Error: {as_role}: cannot check the journal schema as the role '{role}': "
            "permission denied for schema journal; grant the role what it needs "
            '(docs/postgres.md, "Roles and grants")')
    assert not (tmp_path / "out").exists()

    empty = fresh_database().replace("postgresql://postgres@", f"postgresql://{role}@")
    assert main(["new", empty]) == 2  # a writer, in a database that has no schema yet
    said = last_error(capsys.readouterr().err)
    assert said.startswith(f"Error: cannot create the journal schema (version 1) as the role "
                           f"'{role}': permission denied for database ")
    assert said.endswith("; run the migrations once as the schema's owner (docs/postgres.md, "
                         '"Roles and grants")')


def test_pulling_again_after_a_session_grew_is_refused_in_words_that_fit_a_plain_re_pull(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The error asked whether the file was 'left by a pull killed before a session it
    pulled changed', which misleads after an ordinary pull, finished, then run again."""
    from journal.pg.url import session_url

    live = session_file(tmp_path / "files")
    assert main(["push", live, pg_url]) == 0
    out = tmp_path / "out"
    assert main(["pull", pg_url, str(out)]) == 0
    pulled = out / Path(live).name
    before = pulled.read_bytes()
    header = json.loads(Path(live).read_bytes().splitlines()[0])
    with Session.open(session_url(pg_url, header["id"])) as session:
        session.append_message({"role": "user", "content": "more", "timestamp": 2})
    capsys.readouterr()
    assert main(["pull", pg_url, str(out)]) == 2
    assert last_error(capsys.readouterr().err) == (
        f"Error: {pulled} already exists and is not what the pull would write there; nothing "
        "was written (a copy of a session written to in the database since an earlier pull, "
        "finished or killed, wrote it? or another file of that name): to pull the sessions "
        "as they are now, remove the folder's files or pull into an empty folder")
    assert pulled.read_bytes() == before and [p.name for p in out.iterdir()] == [pulled.name]


def test_exporting_a_database_of_several_lineages_counts_them_as_ls_does(
        pg_url: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """It said 'the database holds N sessions' where `ls` lists lineages, and the docs say
    more than one lineage is an error."""
    from journal.pg.url import session_url

    with Session.create(session_url(pg_url, "rotated"), cwd="/w") as session:
        kept = None
        for i in range(6):
            entry = session.append_message({"role": "user", "content": f"turn {i} " + "x" * 200,
                                            "timestamp": 1})
            kept = entry if i == 4 else kept
        session.append_compaction("summary", kept, 500)
        assert session.rotate().rotated  # a lineage of two sessions
    with Session.create(session_url(pg_url, "other"), cwd="/w") as session:
        session.append_message({"role": "user", "content": "hello", "timestamp": 1})
    monkeypatch.setenv("JOURNAL_DATABASE_URL", pg_url)
    assert main(["ls", "pg:", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2
    for named, one in (("pg:", "pg:<id>"), (pg_url, "...?session=<id>")):
        assert main(["export", named]) == 2
        assert last_error(capsys.readouterr().err) == (
            f"Error: {named}: the database holds 2 lineages of sessions, and export takes one: "
            f"name one of its sessions ({one}, or the URL 'journal ls {named}' gives the "
            "lineage)")


def test_push_pull_and_export_say_what_they_start_on_only_where_progress_is_shown(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """They printed `journal: pushing DIR` (pulling into, exporting) to stderr always: into
    a script's --json run, a cron job's log, a pipe. As progress bars are, it is shown on a
    terminal and without --json; elsewhere it is logged, shown with -v."""
    import os
    import subprocess
    import sys

    from journal.pg.connect import connect

    connect(pg_url).close()  # the schema made now: the push's warning would be on stderr
    live = session_file(tmp_path / "files")
    folder = str(tmp_path / "files")
    session = f"{pg_url}?session={json.loads(Path(live).read_bytes().splitlines()[0])['id']}"
    runs = {"push": ["push", folder, pg_url], "pull": ["pull", pg_url, str(tmp_path / "out")],
            "export": ["export", session, "-o", str(tmp_path / "out.md")]}
    said = {"push": f"pushing {folder}", "pull": f"pulling into {tmp_path / 'out'}",
            "export": f"exporting {session} as md"}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for name, argv in runs.items():  # stderr a pipe: nothing, with --json or without
        for extra in ([], ["--json"]):
            done = subprocess.run([sys.executable, "-m", "journal.cli", *argv, *extra],
                                  capture_output=True, text=True, env=env, timeout=60)
            assert done.returncode == 0 and done.stderr == "", (name, extra, done.stderr)
        done = subprocess.run([sys.executable, "-m", "journal.cli", "-v", *argv, "--json"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0 and f"Info: {said[name]}\n" in done.stderr, done.stderr

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # as on a terminal
    for name, argv in runs.items():
        assert main(argv) == 0
        assert capsys.readouterr().err.startswith(f"journal: {said[name]}\n"), name
        assert main([*argv, "--json"]) == 0
        assert "journal: " not in capsys.readouterr().err, name


def test_usage_writes_tab_separated_lines_when_stdout_is_no_terminal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """It drew a box table into a pipe or a file, where ls and search write tab-separated
    lines; the lines about the counting go to stderr there, as search's count does."""
    import sys

    folder = tmp_path / "sessions"
    for name in ("one", "two"):
        with Session.create(str(folder), cwd="/w") as session:
            session.append_session_info(name)
            session.append_message({"role": "assistant", "content": [], "provider": "p",
                                    "model": "m", "stopReason": "stop", "timestamp": 2,
                                    "usage": {"input": 1000, "output": 20, "cacheRead": 0,
                                              "cacheWrite": 0, "totalTokens": 1020,
                                              "cost": {"total": 0.5}}})
    monkeypatch.chdir(tmp_path)
    assert main(["usage", "sessions"]) == 0
    out, err = capsys.readouterr()
    heading, *rows = (line.split("\t") for line in out.splitlines())
    assert heading == ["session", "name", "msgs", "input", "output", "cache read",
                       "cache write", "cost $", "cost from"]
    assert sorted(row[1] for row in rows[:-1]) == ["one", "two"]
    assert rows[-1] == ["total", "", "2", "2,000", "40", "0", "0", "1.0000", "recorded"]
    assert err.startswith("2 session(s) in 2 file(s); prices from ")
    assert "┃" not in out + err

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # as on a terminal: the table
    assert main(["usage", "sessions", "--by", "model"]) == 0
    out, err = capsys.readouterr()
    assert "Usage by model" in out and "┃" in out and err == ""


@pytest.mark.parametrize("command", ["run", "chat"])
def test_the_agents_sessions_dir_help_names_pg_as_the_readme_does(
        command: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`journal-agent run --help` gave only the postgresql:// form for --sessions-dir; the
    README and docs/cli.md give `pg:` too."""
    from agent.cli import main as agent_main

    monkeypatch.setenv("COLUMNS", "400")  # one line an option: nothing cut at a hyphen
    with pytest.raises(SystemExit) as done:
        agent_main([command, "--help"])
    assert done.value.code == 0
    [line] = [line for line in capsys.readouterr().out.splitlines()
              if line.lstrip().startswith("--sessions-dir")]
    assert ("a PostgreSQL database (postgresql://user@host/db, or pg: for the one "
            "$JOURNAL_DATABASE_URL names)") in line


def test_the_agents_queue_help_says_it_takes_a_database_session(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`journal-agent queue --help` called SESSION 'the session file', while the command
    queues for a database session too (docs/cli.md, `journal-agent queue`)."""
    from agent.cli import main as agent_main

    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit):
        agent_main(["queue", "--help"])
    [line] = [line for line in capsys.readouterr().out.splitlines()
              if line.lstrip().startswith("SESSION ")]
    assert "or a database session (pg:ID, postgresql://...?session=ID)" in line
