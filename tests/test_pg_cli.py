"""The journal commands on a database session: named by URL, or by `pg:<id>` in the database
JOURNAL_DATABASE_URL names; a bad name is one `Error:` line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")

from journal import Session, load  # noqa: E402
from journal.pg.url import session_url  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


CLI = "import sys\nfrom journal.cli.commands import main\nsys.exit(main())\n"


def journal(*args: str, env: dict[str, str],
            stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", CLI, *args], input=stdin,
                          capture_output=True, env=env, timeout=60)


@pytest.fixture
def env(tmp_path: Path, pg_url: str) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
            "JOURNAL_DATABASE_URL": pg_url}


def test_append_show_and_context_work_on_a_database_session(
        env: dict[str, str], pg_url: str) -> None:
    url = session_url(pg_url, "cli")
    with Session.create(url, cwd="/") as session:
        first = session.append_message({"role": "user", "content": "one", "timestamp": 1})
    added = journal("append", "pg:cli", "--json", env=env,
                    stdin=b'{"role":"assistant","content":[{"type":"text","text":"two"}],'
                          b'"provider":"p","model":"m","stopReason":"stop","timestamp":2}\n')
    assert added.returncode == 0, added.stderr.decode()
    ids = json.loads(added.stdout)["ids"]
    assert [e["id"] for e in load(url).entries] == [first, *ids]
    shown = journal("show", url, "--json", env=env)
    assert shown.returncode == 0, shown.stderr.decode()
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [r["entry"]["id"] for r in rows if "entry" in r] == [first, *ids]
    context = journal("context", "pg:cli", "--json", env=env)
    assert context.returncode == 0, context.stderr.decode()
    assert [m["role"] for m in json.loads(context.stdout)["messages"]] == ["user", "assistant"]
    tree = journal("tree", "pg:cli", "--json", env=env)
    assert tree.returncode == 0, tree.stderr.decode()
    assert [n["id"] for n in json.loads(tree.stdout)["nodes"]] == [first, *ids]
    info = journal("info", "pg:cli", "--json", env=env)
    assert info.returncode == 0, info.stderr.decode()
    data = json.loads(info.stdout)
    assert data["entries"] == 2 and data["leafId"] == ids[-1]


def test_a_database_session_forced_as_claude_is_refused_without_showing_a_password(
        env: dict[str, str], pg_url: str) -> None:
    """A database holds pi sessions only: `--dialect claude` on one is refused, as on a pi
    file, by repair and the readers alike, and the URL is named without its password."""
    url = session_url(pg_url.replace("postgres@", "postgres:s3cret@", 1), "forced")
    with Session.create(url, cwd="/") as session:
        session.append_message({"role": "user", "content": "one", "timestamp": 1})
    before = load(url).entries
    for argv in (["repair"], ["repair", "--check"], ["info"], ["show"], ["tail"]):
        result = journal(*argv, "--dialect", "claude", url, env=env)
        err = result.stderr.decode()
        assert result.returncode == 2 and result.stdout == b"", (argv, err)
        assert "a pi session, not a Claude Code transcript" in err, (argv, err)
        assert "s3cret" not in err and err.count("\n") == 1, (argv, err)
    assert load(url).entries == before


def test_a_short_name_without_a_default_database_is_one_error_line(
        env: dict[str, str]) -> None:
    del env["JOURNAL_DATABASE_URL"]
    result = journal("show", "pg:cli", env=env)
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:")
    assert "JOURNAL_DATABASE_URL" in lines[0]


def test_a_missing_database_session_is_one_error_line(env: dict[str, str],
                                                      pg_url: str) -> None:
    from journal.pg.connect import connect

    connect(pg_url).close()  # the schema is there: the session is not
    result = journal("show", "pg:nobody-here", env=env)
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and "no such session" in lines[0]
    assert "`journal ls` of the database lists its sessions" in lines[0]


def test_a_misspelt_session_parameter_is_named(env: dict[str, str], pg_url: str) -> None:
    """`?sesion=ID`: the error names the parameter it found, not only the one it wants."""
    result = journal("info", f"{pg_url}?sesion=abc&sslmode=disable", env=env)
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "a session URL names exactly one session" in lines[0]
    assert "(none here: its parameters are 'sesion', 'sslmode')" in lines[0], lines


def test_a_writer_that_creates_the_schema_says_so_once(env: dict[str, str],
                                                       pg_url: str) -> None:
    """A writer pointed at a database with no journal schema (a misspelt name that exists)
    makes it, and says so: once, as a warning naming the database; not on the next write."""
    first = journal("new", "pg:", "--json", env=env)
    assert first.returncode == 0, first.stderr.decode()
    said = first.stderr.decode().strip().splitlines()
    database = pg_url.rsplit("/", 1)[1]
    assert said == [f"Warning: created the journal schema in database '{database}', which "
                    "had none: the first session stored there (is it the database meant?)"]
    second = journal("new", "pg:", "--json", env=env)
    assert second.returncode == 0 and second.stderr == b"", second.stderr.decode()


@pytest.mark.parametrize("argv", [["show", "pg:typo"], ["info", "pg:typo"], ["ls", "DB"],
                                  ["search", "x", "DB"], ["tail", "pg:typo", "-n", "1"],
                                  ["tail", "pg:typo", "-f"]])
def test_a_read_of_a_database_without_the_schema_changes_nothing_there(
        env: dict[str, str], pg_url: str, argv: list[str]) -> None:
    """A read command given a database nothing was stored in (a misspelt name, say) says so,
    exit 2, and leaves it as it was: it once created the journal schema there."""
    import psycopg

    result = journal(*[pg_url if a == "DB" else a for a in argv], env=env)
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert lines[-1].startswith("Error:") and "no journal schema in this database" in lines[-1]
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'journal'"
                           ).fetchone()
    assert row is not None and row[0] == 0


def has_journal_schema(url: str) -> bool:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'journal'"
                           ).fetchone()
    return row is not None and row[0] == 1


def two_copies_of_one_session(folder: Path) -> Path:
    """A folder holding one session twice (a copy in a subfolder): read and compared, both
    are refused (which of them is the session is not the push's to guess)."""
    with Session.create(str(folder), cwd="/") as session:
        session.append_message({"role": "user", "content": "one", "timestamp": 1})
    live = Path(session.path)
    (folder / "copy").mkdir()
    (folder / "copy" / live.name).write_bytes(live.read_bytes())
    return folder


@pytest.mark.parametrize("case", ["refused file", "missing path", "empty folder",
                                  "one session twice"])
def test_a_push_that_stores_nothing_leaves_a_database_without_the_schema_as_it_was(
        env: dict[str, str], pg_url: str, tmp_path: Path, case: str) -> None:
    """A push to a database without the journal schema (a misspelt name that exists) that
    stores no session makes no schema there and gives no warning that it did: the files are
    read before the database is asked. It once made the schema, saying "the first session
    stored there", before refusing the file or the path."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    if case == "refused file":
        (folder / "notes.jsonl").write_text("not a session\n")
        source, code = folder / "notes.jsonl", 2
    elif case == "missing path":
        source, code = tmp_path / "no" / "such.jsonl", 2
    elif case == "empty folder":
        source, code = folder, 0
    else:
        source, code = two_copies_of_one_session(folder), 2
    result = journal("push", str(source), pg_url, env=env)
    err = result.stderr.decode()
    assert result.returncode == code, err
    assert "Warning" not in err and "schema" not in err, err
    assert not has_journal_schema(pg_url)
    if case == "empty folder":
        assert result.stdout.decode().splitlines()[-1] == (
            f"nothing to push: no session file in {folder} (the database was not asked)")


def test_a_push_that_stores_a_session_makes_the_schema_and_says_so(
        env: dict[str, str], pg_url: str, tmp_path: Path) -> None:
    """Beside a refused file, a session stored: the schema is made for it, with the warning."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "notes.jsonl").write_text("not a session\n")
    with Session.create(str(folder), cwd="/") as session:
        session.append_message({"role": "user", "content": "one", "timestamp": 1})
    result = journal("push", str(folder), pg_url, "--json", env=env)
    assert result.returncode == 2
    database = pg_url.rsplit("/", 1)[1]
    assert f"Warning: created the journal schema in database '{database}', which had none: the" \
        " first session stored there (is it the database meant?)" in result.stderr.decode()
    report = json.loads(result.stdout)
    assert [row["action"] for row in report["sessions"]] == ["new", "refused"]
    assert [e["id"] for e in load(session_url(pg_url, session.header["id"])).entries] == [
        e["id"] for e in load(session.path).entries]


def test_export_as_claude_takes_a_database_session_as_it_takes_a_file(
        env: dict[str, str], pg_url: str, tmp_path: Path) -> None:
    """`export --dialect claude` writes a database session (`pg:ID`, its full URL) as it
    writes the same session's file; it took the name for a path: `<cwd>/pg:ID: no such file`,
    a URL's `//` squashed."""
    from journal.pg.transfer import push

    with Session.create(str(tmp_path), cwd="/w") as session:
        session.append_message({"role": "user", "content": "hello", "timestamp": 1})
        session.append_message({"role": "assistant", "content": [{"type": "text",
                                "text": "hi"}], "provider": "p", "model": "m",
                                "stopReason": "stop", "timestamp": 2})
    push(session.path, pg_url)
    sid = session.header["id"]

    def exported(name: str, out: Path) -> list[dict[str, Any]]:
        result = journal("export", name, "--dialect", "claude", "-o", str(out), "--json",
                         env=env)
        assert result.returncode == 0, result.stderr.decode()
        written = Path(json.loads(result.stdout)["path"])
        assert written.parent == out
        return [json.loads(line) for line in written.read_text().splitlines()]

    def kept(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(r["type"], r["message"]["role"], r["message"]["content"], r["cwd"])
                for r in records]

    expected = kept(exported(session.path, tmp_path / "file"))
    assert [k[:2] for k in expected] == [("user", "user"), ("assistant", "assistant")]
    assert kept(exported(f"pg:{sid}", tmp_path / "short")) == expected
    assert kept(exported(session_url(pg_url, sid), tmp_path / "url")) == expected
    missing = journal("export", "pg:nobody", "--dialect", "claude", "-o", str(tmp_path),
                      env=env)
    lines = missing.stderr.decode().splitlines()
    assert missing.returncode == 2 and len(lines) == 1, lines
    assert "no such session" in lines[0] and "//" in lines[0], lines


@pytest.mark.parametrize("argv", [
    ("show", "postgresql://[bad?session=s1"),
    ("new", "postgresql://u:secret@[bad/db?session=s1"),
    ("ls", "postgresql://[bad"),
    ("push", "{folder}", "postgresql://[bad"),
    ("pull", "postgresql://[bad?session=s1", "{folder}/out"),
])
def test_a_url_that_cannot_be_split_is_one_error_line(
        env: dict[str, str], tmp_path: Path, argv: tuple[str, ...]) -> None:
    """A malformed URL (a bracket opening no IPv6 address) is one Error: line and exit 2, its
    password hidden, nothing written; it was a Python traceback."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    result = journal(*(a.format(folder=folder) for a in argv), env=env)
    assert result.returncode == 2, result.stderr.decode()
    errors = [line for line in result.stderr.decode().splitlines()
              if not line.startswith("journal: ")]  # progress lines of push and pull
    assert len(errors) == 1 and errors[0].startswith("Error:"), errors
    assert "not a valid URL" in errors[0] and "secret" not in errors[0]
    assert [p.name for p in folder.iterdir()] == []


def test_a_default_database_naming_a_session_says_which_variable(env: dict[str, str]) -> None:
    """JOURNAL_DATABASE_URL with ?session= is refused, naming the variable (the error named
    only the URL, which the user never typed on that command line)."""
    env["JOURNAL_DATABASE_URL"] = env["JOURNAL_DATABASE_URL"] + "?session=other"
    result = journal("show", "pg:cli", env=env)
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: JOURNAL_DATABASE_URL: ")
    assert "names no session" in lines[0]


@pytest.mark.parametrize(("url", "expected"), [
    ("postgresql://u:pw@MyHost:5432/db?session=x", "postgresql://u:***@MyHost:5432/db?session=x"),
    ("postgresql://u:p@ss@h1:5432,h2/db?session=s1", "postgresql://u:***@h1:5432,h2/db?session=s1"),
    ("postgresql://u:12#ab@host/db", "postgresql://u:***@host/db"),
    ("postgresql://u:p?ss@host/db", "postgresql://u:***@host/db"),
    ("postgresql://u@host/db?password=secret&session=s1",
     "postgresql://u@host/db?password=***&session=s1"),
    ("postgresql://:pw@h/db", "postgresql://:***@h/db"),
    ("postgresql://host/db?session=s", "postgresql://host/db?session=s"),
])
def test_a_url_is_shown_without_its_password_whatever_it_holds(url: str, expected: str) -> None:
    """Messages name a URL without its password: one holding '@', '#' or '?' (which
    splitting a URL stops at), or given as a `password=` parameter, included."""
    from journal.pg.url import shown

    assert shown(url) == expected


@pytest.mark.parametrize("url", [
    "postgresql://u:pw@host:5432/db?session=x",
    "postgresql://u@host/db?password=secret&sslmode=prefer&session=s1",
])
def test_the_name_a_session_is_shown_by_leads_back_to_its_password(url: str) -> None:
    """A session's name (its URL without the password) is passed on as its path inside the
    process: parsed again, it is the database the caller named, password and all; a shown
    URL that was never parsed with a password stays as it is."""
    from journal.pg.url import parse_url

    parsed = parse_url(url)
    assert "***" in parsed.url and parse_url(parsed.url) == parsed
    stranger = "postgresql://someone:***@elsewhere/db?session=z"
    assert parse_url(stranger).conninfo == "postgresql://someone:***@elsewhere/db"


def test_a_pg_name_leads_back_to_the_default_databases_password(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`pg:<id>` in a JOURNAL_DATABASE_URL whose query a URL writes otherwise ('/' in a
    value): its shown name still leads back to the password."""
    from journal.pg.url import parse_url

    database = "postgresql://al:pw@h:5/db?host=/var/run/postgresql&application_name=a/b"
    monkeypatch.setenv("JOURNAL_DATABASE_URL", database)
    parsed = parse_url("pg:ID")
    assert parsed.conninfo == database
    assert "pw" not in parsed.url and parse_url(parsed.url).conninfo == database


@pytest.mark.parametrize(("url", "one"), [
    ("postgresql://h/db?session=s1", True),
    ("postgresql://h/db?%73ession=s1", True),
    ("pg:s1", True),
    ("postgresql://h/db", False),
    ("postgresql://u:xsession=1@h/db", False),  # in the password
    ("postgresql://h/session=x", False),  # the database's name
    ("postgresql://h/db?application_name=session=a", False),  # another parameter's value
    ("postgresql://h/db?session=", True),  # an empty one: not a database (journal new
    # added a session of its own: '?session=&session=<id>'); parse_url says it is empty
])
def test_whether_a_url_names_a_session_is_read_from_its_parameters(url: str, one: bool) -> None:
    from journal.pg.url import BadDatabaseUrl, names_session, parse_database

    assert names_session(url) is one
    if one and "?" in url:
        with pytest.raises(BadDatabaseUrl):
            parse_database(url)


@pytest.fixture
def password_url(pg_url: str) -> Any:
    """`pg_url` as a role that must give its password (scram-sha-256, in the URL): the run's
    server trusts everyone else, so a command that drops the password fails here."""
    import uuid

    import psycopg

    role, password = f"pw_{uuid.uuid4().hex[:8]}", "s3cret-word"
    rule = f"host all {role} 127.0.0.1/32 scram-sha-256\n"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'")
        hba = conn.execute("SHOW hba_file").fetchone()[0]  # type: ignore[index]
        before = Path(hba).read_text()
        Path(hba).write_text(rule + before)
        conn.execute("SELECT pg_reload_conf()")
    host = pg_url.split("@", 1)[1]
    try:
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(f"postgresql://{role}:wrong@{host}").close()
        yield f"postgresql://{role}:{password}@{host}", password
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            Path(hba).write_text(before)
            conn.execute("SELECT pg_reload_conf()")


def test_a_password_in_the_url_reaches_the_database_for_every_command(
        env: dict[str, str], password_url: tuple[str, str]) -> None:
    """info, repair and tail name the session without its password, and connect with it
    all the same (they once connected by the name they show)."""
    base, password = password_url
    url = session_url(base, "pw")
    with Session.create(url, cwd="/") as session:
        session.append_message({"role": "user", "content": "one", "timestamp": 1})
    for args in (["info", url, "--json"], ["repair", url, "--check"], ["repair", url],
                 ["tail", url, "-n", "1", "--no-follow"], ["quarantine", "list", url]):
        done = journal(*args, env=env)
        out = done.stdout.decode() + done.stderr.decode()
        assert done.returncode == 0, (args, out)
        assert password not in out, (args, out)


def test_a_follower_refused_for_good_ends_instead_of_waiting(
        password_url: tuple[str, str]) -> None:
    """While a session is followed, its role's password changes and its connections end:
    reconnecting is refused for good (password authentication failed), which no wait mends,
    so the follow ends with the error (a server that is down is waited for instead)."""
    import threading
    import time

    import psycopg

    from journal import follow
    from journal.pg.connect import DatabaseError, DatabaseUnavailable

    base, _ = password_url
    role = base.split("://", 1)[1].split(":", 1)[0]
    url = session_url(base, "refused")
    Session.create(url, cwd="/").close()
    failed: list[BaseException] = []
    stop = threading.Event()

    def follower() -> None:
        try:
            for _ in follow(url, stop=stop, timeout=0.2):
                pass
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            failed.append(e)

    thread = threading.Thread(target=follower)
    thread.start()
    try:
        time.sleep(0.5)
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"ALTER ROLE {role} PASSWORD 'changed-now'")
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE usename = %s AND pid <> pg_backend_pid()", (role,))
        thread.join(timeout=20)
        assert not thread.is_alive(), "the follower kept waiting"
    finally:
        stop.set()
        thread.join(timeout=20)
    assert len(failed) == 1 and isinstance(failed[0], DatabaseError)
    assert not isinstance(failed[0], DatabaseUnavailable)
    assert "password authentication failed" in str(failed[0])


def test_a_session_named_in_a_line_of_output_is_a_name_that_works(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """tail's headings and 'continued in', and the agent's compaction line, named a database
    session by the end of its URL ('postgres?session=x'), which addresses nothing: now
    `pg:<id>` in the default database, else the URL (without its password)."""
    from journal.pg.url import short_name

    monkeypatch.setenv("JOURNAL_DATABASE_URL", "postgresql://u:pw@h:5/db")
    assert short_name("/a/b/s.jsonl") == "s.jsonl"
    assert short_name("postgresql://u:pw@h:5/db?session=x%2Fy") == "pg:x/y"
    assert short_name("pg:abc") == "pg:abc"
    assert short_name("postgresql://u:pw@h:5/other?session=x") == \
        "postgresql://u:***@h:5/other?session=x"
    monkeypatch.delenv("JOURNAL_DATABASE_URL")
    assert short_name("postgresql://u@h:5/db?session=x") == "postgresql://u@h:5/db?session=x"


def test_naming_a_session_short_changes_no_password_and_reads_any_query(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """short_name compares the session's database with JOURNAL_DATABASE_URL's: it once parsed
    the default, which made the session's shown URL lead to the default's (stale) password
    in this process; and a default whose query a URL writes otherwise ('/') never matched."""
    from journal.pg.url import parse_url, short_name

    monkeypatch.setenv("JOURNAL_DATABASE_URL",
                       "postgresql://u:stale@h:5/db?host=/var/run/postgresql")
    parsed = parse_url("postgresql://u:fresh@h:5/db?host=/var/run/postgresql&session=x")
    assert short_name(parsed.url) == "pg:x"
    assert "fresh" in parse_url(parsed.url).conninfo


@pytest.mark.parametrize(("message", "for_good"), [
    ('connection failed: ... FATAL:  password authentication failed for user "al"', True),
    ('connection failed: ... FATAL:  database "nope" does not exist', True),
    ('connection failed: ... FATAL:  role "x" does not exist', True),
    ("connection failed: ... FATAL:  no pg_hba.conf entry for host 'h'", True),
    ("connection failed: ... FATAL:  the database system is shutting down", False),
    ("connection failed: ... FATAL:  sorry, too many clients already", False),
    ("connection failed: ... FATAL:  das Datenbanksystem startet", False),
    ("connection failed: ... FATAL:  pgbouncer cannot connect to server", False),
    ("connection failed: ... Connection refused", False),
    ("connection is bad: invalid sslmode value: \"bogus\"", True),
    ("connection is bad: invalid port number: \"99999\"", True),
    ("connection failed: ... fe_sendauth: no password supplied", True),
])
def test_a_connection_is_refused_for_good_only_in_the_servers_own_words(
        message: str, for_good: bool) -> None:
    """Only what the server names as the password, the role, the database or pg_hba.conf is
    taken as lasting; a restart, full slots, a pooler or a message in another language is
    waited for (it once counted every FATAL but a few as lasting)."""
    from journal.pg.connect import refused_for_good

    assert refused_for_good(Exception(message)) is for_good


@pytest.mark.parametrize("query", ["foo=bar", "connect_timeout=abc", "sslmode=bogus"])
def test_a_url_libpq_cannot_use_is_no_unreachable_server(pg_url: str, query: str) -> None:
    """A mistake in the URL's options was DatabaseUnavailable, which is Unreachable: a
    caller that waits for an unreachable server (a live tail) would wait for ever."""
    from journal import Unreachable
    from journal.pg.connect import DatabaseError, connect

    with pytest.raises(DatabaseError) as raised:
        connect(f"{pg_url}?{query}")
    assert not isinstance(raised.value, Unreachable)


def test_lineage_lists_a_database_sessions_lineage(env: dict[str, str], pg_url: str) -> None:
    """`journal lineage` on any session of a rotated database lineage lists its sessions'
    URLs, oldest first, the live one last; a URL naming no session is one error line."""
    url = session_url(pg_url, "lined")
    with Session.create(url, cwd="/") as session:
        for _ in range(2):
            for n in range(4):
                kept = session.append_message({"role": "user", "content": f"m{n}" * 300,
                                               "timestamp": 1})
            session.append_compaction("summary", kept, tokens_before=1)
            assert session.rotate().rotated
        live = session.path
    first = journal("lineage", "pg:lined", env=env)
    assert first.returncode == 0, first.stderr.decode()
    lines = first.stdout.decode().splitlines()
    rows = [line.split() for line in lines]
    assert len(rows) == 3 and rows[0] == ["archived", url] and rows[-1] == ["live", live]
    assert rows[1][0] == "archived" and "session=" in rows[1][1]
    as_json = journal("lineage", live, "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr.decode()
    assert json.loads(as_json.stdout) == {"lineage": [row[1] for row in rows], "live": live}
    database = journal("lineage", pg_url, env=env)
    assert database.returncode == 2
    err = database.stderr.decode().strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error:") and "?session=" in err[0]
    assert "`journal ls URL`" in err[0] and "database_lineages" not in err[0]


def test_rotate_flags_a_database_session_cannot_take_are_named_as_flags(
        env: dict[str, str], pg_url: str) -> None:
    """`--no-compress`, and `--keep` without `--archive-dir`, on a database session: one
    error line naming the flags (not the library's parameters), nothing rotated."""
    url = session_url(pg_url, "flags")
    with Session.create(url, cwd="/") as session:
        kept = session.append_message({"role": "user", "content": "m" * 300, "timestamp": 1})
        session.append_compaction("summary", kept, tokens_before=1)
    before = load(url).entries
    for argv, words in ((["--no-compress"], "--no-compress is for files"),
                        (["--keep", "1"], "give --archive-dir DIR too")):
        result = journal("rotate", "pg:flags", *argv, env=env)
        err = result.stderr.decode().strip().splitlines()
        assert result.returncode == 2 and len(err) == 1 and words in err[0], err
        assert "compress=False" not in err[0] and "archive_dir" not in err[0], err
    assert load(url).entries == before


def test_a_session_id_too_long_to_announce_is_refused_before_anything_is_written(
        env: dict[str, str], pg_url: str, tmp_path: Path) -> None:
    """A commit to a followed session is announced with the session's id in a NOTIFY
    payload, which PostgreSQL refuses from 8,000 bytes on. A session of a 9,000-character id
    was made and written all the same, until someone followed it: then every commit was
    refused. Such an id is refused where it is named (`new`, `append`, the API, `push` of a
    file whose header holds one), and one at the limit is followed and written to."""
    from journal.pg.storage import PostgresStorage

    long = "s" * 9000
    for args in (("new", f"pg:{long}"), ("append", session_url(pg_url, long))):
        result = journal(*args, env=env, stdin=b'{"role": "user", "content": "x"}\n')
        assert result.returncode == 2, result
        lines = result.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error:"), lines
        assert "a session id of 9,000 bytes (a database holds ids of at most 1,024" in lines[0]
        assert len(lines[0]) < 400
    with pytest.raises(Exception, match="at most 1,024"):
        Session.create(session_url(pg_url, "é" * 600), cwd="/")  # 1,200 bytes
    made = json.loads(journal("new", str(tmp_path), "--json", env=env).stdout)
    text = Path(made["path"]).read_text()
    Path(made["path"]).write_text(text.replace(made["id"], long, 1))
    result = journal("push", made["path"], pg_url, env=env)
    assert result.returncode == 2 and b"a session id of 9,000 bytes" in result.stderr
    listed = journal("ls", "pg:", "--json", env=env)
    assert listed.returncode == 2 and b"no journal schema" in listed.stderr  # none stored

    url = session_url(pg_url, "t" * 1024)  # the limit
    with Session.create(url, cwd="/") as writer:
        writer.append_message({"role": "user", "content": "unfollowed", "timestamp": 1})
        storage = PostgresStorage.from_url(url)
        watch = storage.open_watch(threading.Event(), timeout=1.0)
        try:
            assert watch.wait([storage])  # registered as its follower
            writer.append_message({"role": "user", "content": "followed", "timestamp": 1})
        finally:
            watch.close()
    assert [e["message"]["content"] for e in load(url).entries] == ["unfollowed", "followed"]
