"""What names a session in PostgreSQL: a URL, or a short name in the default database.

- `postgresql://user@host:port/db?session=<id>` (or `postgres://`): the session `<id>` in that
  database. Every other query parameter is the driver's (`sslmode=require`, ...), passed on.
- `pg:<id>`: the session `<id>` in the database that the `JOURNAL_DATABASE_URL` environment
  variable names (a URL without `session`), the default for commands and the API.
- `pg:` alone: that default database itself, wherever a database is taken (`journal ls pg:`,
  `push`, `pull`, `search`, `usage`, `export`, `new`, the agent's `--sessions-dir`).

This module needs no driver: `import journal` can tell a URL from a path without psycopg.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TypeGuard
from urllib.parse import (
    SplitResult,
    parse_qsl,
    quote,
    unquote,
    urlencode,
    urlsplit,
    urlunsplit,
)

from ..errors import JournalError, NotASession

__all__ = ["DATABASE_ENV", "DEFAULT_DATABASE", "MAX_SESSION_ID", "SessionUrl", "checked_id",
           "hide_passwords", "is_database_url", "long_id", "names_session", "no_such_session",
           "parse_database", "parse_url", "session_url", "short_name", "shown", "shown_in"]

DATABASE_ENV = "JOURNAL_DATABASE_URL"
SCHEMES = ("postgresql://", "postgres://")
_AUTHORITY = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<auth>[^/]*)(?P<rest>.*)",
                        re.DOTALL)
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)
SHORT = "pg:"
DEFAULT_DATABASE = SHORT
"""`pg:` alone: the database JOURNAL_DATABASE_URL names (`pg:<id>` is a session in it)."""
_MASK = "***"  # what a password is shown as
MAX_SESSION_ID = 1024
"""The longest session id a database holds, in UTF-8 bytes: a commit to a followed session
is announced with its id in a NOTIFY payload, which PostgreSQL refuses from 8,000 bytes on
(so a longer id would have every commit refused while anyone follows the session)."""


class BadDatabaseUrl(JournalError):
    """A database URL that does not name one session (or no default database is set)."""


def is_database_url(target: object) -> TypeGuard[str]:
    """Whether `target` names a database session (a URL or `pg:<id>`), not a file."""
    return isinstance(target, str) and target.startswith((*SCHEMES, SHORT))


@dataclass(frozen=True)
class SessionUrl:
    """A session in a database: `conninfo` (the URL without `session`) and the session id."""

    conninfo: str
    session: str

    @property
    def url(self) -> str:
        """The full URL, the session's name in messages (without any password)."""
        return session_url(_without_password(self.conninfo), self.session)


def parse_url(target: str, *, default: str | None = None) -> SessionUrl:
    """Split a session URL (or `pg:<id>` against `default`, else JOURNAL_DATABASE_URL)."""
    if target.startswith(SHORT) and not target.startswith(SCHEMES):
        session = target[len(SHORT):]
        if not session:
            raise BadDatabaseUrl(f"{target}: names the default database ({DATABASE_ENV}), not "
                                 "a session: pg:<id> names one of its sessions")
        return SessionUrl(_default_database(target, default), checked_id(session, target))
    parts = _split(target)
    query = parse_qsl(parts.query, keep_blank_values=True)
    sessions = [value for key, value in query if key == "session"]
    if len(sessions) != 1 or not sessions[0]:
        others = sorted({key for key, _ in query if key not in ("session", "password")})
        found = (f" (none here: its parameters are {', '.join(map(repr, others))})"
                 if others and not sessions else "")
        raise BadDatabaseUrl(f"{_without_password(target)}: a session URL names exactly one "
                             f"session: postgresql://user@host:port/db?session=<id>{found}")
    rest = [(key, value) for key, value in query if key != "session"]
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), ""))
    return SessionUrl(_with_password(conninfo), checked_id(sessions[0], target))


def long_id(session: str) -> str | None:
    """Why `session` cannot be a database session's id (None if it can): too long."""
    size = len(session.encode("utf-8", "surrogatepass"))
    if size <= MAX_SESSION_ID:
        return None
    return (f"a session id of {size:,} bytes (a database holds ids of at most "
            f"{MAX_SESSION_ID:,}: each change of a followed session is announced with it)")


def checked_id(session: str, target: str) -> str:
    """`session`, named by `target`; BadDatabaseUrl if a database cannot hold it."""
    why = long_id(session)
    if why is not None:
        shown_target = _without_password(target)
        if len(shown_target) > 120:
            shown_target = shown_target[:100] + "..."
        raise BadDatabaseUrl(f"{shown_target}: names {why}")
    return session


def names_session(url: str) -> bool:
    """Whether `url` names one session (`pg:<id>`, or a `session` parameter) rather than a
    database (a URL without `session`, or `pg:` alone): the rule `parse_url` and
    `parse_database` apply, read from the parsed query."""
    if url.startswith(SHORT) and not url.startswith(SCHEMES):
        return url != DEFAULT_DATABASE
    return any(key == "session"  # an empty one too: `parse_url` then says it is empty
               for key, _ in parse_qsl(_split(url).query, keep_blank_values=True))


def parse_database(url: str) -> str:
    """A database URL as the driver's conninfo; it names no session. `pg:` alone is the
    database JOURNAL_DATABASE_URL names."""
    if url.startswith(SHORT) and not url.startswith(SCHEMES):
        if url != DEFAULT_DATABASE:
            raise BadDatabaseUrl(f"{url}: names a session; the database it is in is "
                                 f"{DEFAULT_DATABASE} (or its postgresql:// URL)")
        return _default_database(url, None)
    parts = _split(url)
    if any(key == "session" for key, _ in parse_qsl(parts.query, keep_blank_values=True)):
        raise BadDatabaseUrl(f"{_without_password(url)}: a database URL names no session")
    return _with_password(url)


def _default_database(target: str, default: str | None) -> str:
    """The conninfo of the default database (`default`, else JOURNAL_DATABASE_URL) that the
    short name `target` (`pg:` or `pg:<id>`) is read against."""
    database = default if default is not None else os.environ.get(DATABASE_ENV)
    what = ("names the default database" if target == DEFAULT_DATABASE
            else "names a session in the default database")
    if not database:
        raise BadDatabaseUrl(f"{target}: {what}, but {DATABASE_ENV} is not set (set it to "
                             "postgresql://...)")
    if not database.startswith(SCHEMES):
        raise BadDatabaseUrl(f"{DATABASE_ENV}={_without_password(database)!r} is not a "
                             "postgresql:// URL")
    try:
        return parse_database(database)
    except BadDatabaseUrl as e:
        raise BadDatabaseUrl(f"{DATABASE_ENV}: {e} (it names the database; 'pg:<id>' "
                             "adds the session)") from None


def no_such_session(locator: str) -> NotASession:
    """The error for a session URL naming a session its database does not hold."""
    return NotASession(locator, "no such session in the database (`journal ls` of the "
                       "database lists its sessions)")


def session_url(conninfo: str, session: str) -> str:
    """The URL of `session` in the database `conninfo` names."""
    joiner = "&" if "?" in conninfo else "?"
    return f"{conninfo}{joiner}session={quote(session, safe='')}"


def shown(target: str) -> str:
    """How results and messages name `target`: a `postgresql://` URL without its password
    (the one needed to read it stays with the caller), anything else as it is."""
    return _without_password(target) if target.startswith(SCHEMES) else target


def short_name(target: str) -> str:
    """A session's name in a line of output: a file's base name; a database session's
    `pg:<id>` where it is in the database JOURNAL_DATABASE_URL names (so the name can be
    used), else its URL without the password."""
    if not is_database_url(target):
        return os.path.basename(target)
    try:
        parsed = parse_url(target)
        default = os.environ.get(DATABASE_ENV)
        # compared, not parsed: parsing the default would remember its password for the
        # shown form, in place of the one the session was opened with
        if default and default.startswith(SCHEMES) and \
                _database_key(default) == _database_key(parsed.conninfo):
            return SHORT + parsed.session
        return parsed.url
    except BadDatabaseUrl:
        return shown(target)


def shown_in(text: str, target: str) -> str:
    """`text` (a message naming `target`) with `target` named as `shown` names it."""
    return text.replace(target, shown(target)) if target else text


def hide_passwords(text: str) -> str:
    """`text` (an error message, say) with the password of every URL-like name in it hidden,
    whatever its scheme (a misspelt `postgress://` too) and even where a path joined to it
    left one slash (`postgress:/user:secret@host`), and every `password=` parameter."""
    text = _ANY_USERINFO.sub(r"\g<1>" + _MASK + "@", text)
    return _ANY_PASSWORD_PARAMETER.sub(r"\g<1>" + _MASK, text)


# a scheme, one or two slashes, a user, ':', the password up to the '@' before the host
# (to the last '@' before the path: a password may hold '@')
_ANY_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*:/{1,2}[^\s/:@]*:)[^\s/]*@")
_ANY_PASSWORD_PARAMETER = re.compile(
    r"(\bpassword\s*=\s*)(?!\*\*\*)('(?:[^'\\]|\\.)*'|[^\s&#]+)", re.IGNORECASE)


def _split(url: str) -> SplitResult:
    """`url` split into its parts; BadDatabaseUrl (naming it without a password) if it cannot
    be (a bracket that opens no IPv6 address). The host part is left to the driver, which
    also takes several hosts (`h1:5432,h2`)."""
    try:
        parts = urlsplit(url)
    except ValueError as e:
        raise BadDatabaseUrl(f"{_without_password(url)}: not a valid URL ({e}); the form is "
                             "postgresql://user@host:port/db, with ?session=<id> for one "
                             "session") from None
    return parts


# A session's name in results and messages is its URL without the password (`SessionUrl.url`,
# `shown`), and that name is passed on inside this process as the session's path (a
# snapshot's, a follower's): connecting by it must reach the database the caller named, with
# the caller's password. So each conninfo parsed here with a password is remembered under its
# shown form, and a shown form parsed later leads back to it.
_HIDDEN: dict[str, str] = {}


def _with_password(conninfo: str) -> str:
    """`conninfo` as parsed; where it is the shown form of one parsed before with a
    password, that one."""
    parts = _split(conninfo)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = [unquote(parts.password)] if parts.password is not None else []
    given += [value for key, value in query if key.lower() == "password"]
    if not given:
        return conninfo
    masked = _database_key(conninfo)
    if all(password == _MASK for password in given):  # a shown form
        return _HIDDEN.get(masked, conninfo)
    _HIDDEN[masked] = conninfo
    return conninfo


def _database_key(conninfo: str) -> str:
    """The database `conninfo` names, without its password, in one spelling whichever way
    its query was written (a database URL is kept as given; a session URL's query is
    written again, without its `session`)."""
    parts = _split(conninfo)
    query = [(key, value) for key, value in parse_qsl(parts.query, keep_blank_values=True)
             if key != "session"]
    return _without_password(urlunsplit((parts.scheme, parts.netloc, parts.path,
                                         urlencode(query), "")))


def _without_password(url: str) -> str:
    """`url` with its password hidden, everything else as written. Read as text, not split:
    a password may hold what splitting stops at ('#', '?', '@'); the user part is everything
    before the last '@' ahead of the first '/' (a query holding '@' with no path before it
    hides more than the password, never less). A `password=` parameter is hidden too."""
    found = _AUTHORITY.match(url)
    if found is not None and "@" in found["auth"]:
        userinfo, host = found["auth"].rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":" + _MASK
        url = f"{found['scheme']}{userinfo}@{host}{found['rest']}"
    return _QUERY_PASSWORD.sub(r"\g<1>" + _MASK, url)
