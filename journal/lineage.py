"""Links between a session file, its successors and its archives, and crash recovery for them.

Rotation seals an old file with a `custom` entry of type `journal.successor` naming the file that
continues it, and the successor's header names the archived old file as `parentSession`. From
any file of a lineage these links lead to the live one, even after the old file moved into the
archive.

Pointers are relative to the session's folder (the seal names the successor's file name and,
for the archived copy, the way from the archive to it; the header names the archive relative
to the folder), so a copied or moved folder is self-contained. Each hop is checked against the
identity of the file it reaches (the successor's session id, and for an absolute pointer left
by older versions, that the file there leads back to where we came from).

A rotation in progress is recorded in an intent file (`<old>.rotating`) so a crash at any step
can be finished or undone deterministically by the next writer; an intent is validated before
anything acts on it (see `journal.intent`).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from . import archivegz, codec
from .archivegz import compressed_name, is_compressed, names_of, uncompressed_name
from .errors import DamagedArchive, JournalError, UnsafeFile, describe_os_error
from .files import (
    fsync_directory,
    make_private_dir,
    open_folder,
    read_regular,
    remove_if_regular,
)
from .header import read_header
from .identity import file_key, inside, plain_name, real_path, same_file
from .idscan import scan_ids
from .intent import MAX_INTENT_BYTES, BadIntent, Intent, parse_intent
from .lock import WriterLock, lock_path_for
from .model import Entry
from .pg.url import is_database_url, parse_url
from .publish import NewFile, link_no_replace, publish_bytes, temp_path_for
from .seal import is_seal, make_seal, write_seal
from .snapshot import last_newline_end, load
from .storage import Lock

log = logging.getLogger(__name__)

INTENT_SUFFIX = ".rotating"
ARCHIVE_DIR = "archive"
MAX_HOPS = 64
_NUMBERED = re.compile(r"(.+\.jsonl)\.[0-9]+")
"""An archive's name rotation numbered because the plain one was taken (`<name>.2`)."""


def last_entry(path: str) -> Entry | None:
    """The last complete entry of a (possibly gzip-compressed) session file."""
    try:
        if is_compressed(path):
            with read_regular(path) as packed, archivegz.reader(packed) as f:
                last = b""
                for raw in f:
                    if raw.endswith(b"\n") and raw.strip():
                        last = raw
            return _entry_of(last)
        with read_regular(path) as f:
            end = last_newline_end(f, os.fstat(f.fileno()).st_size)
            for line in codec.iter_lines_reverse(f, end):
                if line.raw.strip():
                    return _entry_of(line.raw)
    except archivegz.UNREADABLE + (JournalError,):  # a damaged archive has no last entry
        return None
    return None


def _entry_of(raw: bytes) -> Entry | None:
    try:
        value = codec.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def seal_of(path: str) -> dict[str, Any] | None:
    """What a sealed file's seal records (see `seal_pointers`), or None if it is not sealed."""
    entry = last_entry(path)
    if entry is None or not is_seal(entry):
        return None
    data: dict[str, Any] = entry["data"]
    return data


def archived_copies(path: str) -> list[str]:
    """Where rotation may have put `path`: the default archive folder beside it."""
    directory, name = os.path.split(path)
    archive = os.path.join(directory, ARCHIVE_DIR)
    return names_of(os.path.join(archive, name))


def _where_now(path: str) -> str | None:
    """`path` if it exists (or compressed beside it, as in an archive folder elsewhere),
    else the archived copy it has moved into since, if any."""
    return next((a for a in (*names_of(path), *archived_copies(path)) if os.path.exists(a)),
                None)


def _names_file(pointer: object, folder: str, target: str) -> bool:
    """Whether a `parentSession` pointer (relative to `folder`, or absolute) names `target`,
    compressed or not."""
    if not isinstance(pointer, str) or not pointer:
        return False
    named = os.path.normpath(os.path.join(folder, pointer))
    return any(same_file(v, target) for v in names_of(named))


def successor_named_by(seal: dict[str, Any], near: str, sealed_at: str) -> str | None:
    """The successor a seal names, checked against its identity; `near` is where the sealed
    file was live, `sealed_at` where the seal was read (the same file, or its archive).

    Relative pointers are tried first, so a copied or moved folder leads to its own files.
    An absolute `successor` (written by older versions) is only a hint: it is followed when
    the file there names `sealed_at` itself as its parent, so a copy never leads back into
    the folder it was copied from.
    """
    session_id = seal.get("sessionId") if isinstance(seal.get("sessionId"), str) else None
    for candidate, check_parent in _successor_candidates(seal, near, sealed_at):
        found = _where_now(candidate)
        header = read_header(found) if found is not None else None
        if header is None or (session_id is not None and header.get("id") != session_id):
            continue
        if check_parent and not _names_file(header.get("parentSession"),
                                            os.path.dirname(candidate), sealed_at):
            continue
        # named as it is now where that is beside the name (compressed in its archive
        # folder); else by its name, which readers follow into the default archive
        return found if found in names_of(candidate) else candidate
    return None


def successor_watch(seal: dict[str, Any], near: str, sealed_at: str) -> tuple[Any, ...]:
    """A cheap signature of every folder `successor_named_by` looks in for this seal's
    successor (each candidate's folder and the archive folder in it): a file appearing in
    or leaving any of them changes it. A reader that found no successor looks again only
    once it changed, instead of at every read."""
    folders: list[str] = []
    for candidate, _ in _successor_candidates(seal, near, sealed_at):
        for folder in (os.path.dirname(candidate),
                       os.path.join(os.path.dirname(candidate), ARCHIVE_DIR)):
            if folder not in folders:
                folders.append(folder)
    signature: list[Any] = []
    for folder in folders:
        try:
            st = os.stat(folder)
        except OSError:
            signature.append((folder, None))
            continue
        signature.append((folder, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(signature)


def _successor_candidates(seal: dict[str, Any], near: str, sealed_at: str
                          ) -> list[tuple[str, bool]]:
    """Where `successor_named_by` looks, most trusted first: (path, whether the file there
    must name `sealed_at` as its parent)."""
    hint = seal.get("successor")
    name = plain_name(seal.get("file")) or plain_name(
        os.path.basename(hint) if isinstance(hint, str) else None)
    candidates: list[tuple[str, bool]] = []
    if name is not None:
        candidates.append((os.path.join(os.path.dirname(near), name), False))
    back = seal.get("fromArchive")
    if isinstance(back, str) and back and not os.path.isabs(back):
        candidates.append((os.path.normpath(os.path.join(os.path.dirname(sealed_at), back)),
                           False))
    archive_folder = os.path.dirname(sealed_at)
    if name is not None and os.path.basename(archive_folder) == ARCHIVE_DIR:
        # older seals have no `fromArchive`: the default archive sits in the session's folder
        candidates.append((os.path.join(os.path.dirname(archive_folder), name), False))
    if name is not None:
        # rotated in turn into the same archive folder (one elsewhere, say): beside this one
        candidates.append((os.path.join(archive_folder, name), False))
    if isinstance(hint, str) and os.path.isabs(hint):
        candidates.append((os.path.normpath(hint), True))
    return candidates


def successor_of(path: str) -> str | None:
    """The file that continues the sealed file `path` (named as `successor_named_by` finds
    it), where it is now: its archive, once it was rotated in turn. None when `path` is not
    sealed or its successor is not there."""
    seal = seal_of(path)
    found = successor_named_by(seal, path, path) if seal is not None else None
    return _where_now(found) if found is not None else None


def _child_by_header(path: str) -> str | None:
    """A session beside `path` whose header names the archive of `path` as parent: its
    rotation successor. A fork names `path` itself (pi writes the parent's own path), and
    is not a successor. Failing that, where the successor was live, found down the chain of
    `parentSession` pointers of a session beside it (`_successor_down_the_chain`)."""
    directory, name = os.path.split(path)
    try:
        names = sorted(os.listdir(directory or "."))
    except OSError:
        return None
    candidates = [n for n in names if n.endswith(".jsonl") and n != name]
    for candidate in candidates:
        header = read_header(os.path.join(directory, candidate))
        parent = header.get("parentSession") if header else None
        if not isinstance(parent, str) or not archive_name_of(name, parent):
            continue
        if os.path.normpath(os.path.join(directory, parent)) != path:
            return os.path.join(directory, candidate)
    for candidate in candidates:
        live = os.path.join(directory, candidate)
        if not _passes_archive_of(name, live, directory):
            continue  # (headers only: the checked walk reads seals, a .gz archive whole)
        found = _successor_down_the_chain(path, live)
        if found is not None:
            return found
    return None


def _passes_archive_of(name: str, live: str, directory: str) -> bool:
    """Whether the `parentSession` pointers from `live` back through the files they name
    (headers only, nothing checked) reach a pointer to an archive of the file `name`."""
    current, seen = live, {live}
    for _ in range(MAX_HOPS):
        header = read_header(current)
        pointer = header.get("parentSession") if header else None
        if not isinstance(pointer, str) or not pointer:
            return False
        if archive_name_of(name, pointer):
            return True
        older = next((c for c in _local_parents(pointer, directory)
                      if os.path.isfile(c) and c not in seen), None)
        if older is None:
            return False
        seen.add(older)
        current = older
    return False


def archive_name_of(name: str, pointer: str) -> bool:
    """Whether `pointer` names an archive of the file `name`: an archive takes the file's
    name, or `<name>.N` when that name was taken, and `.gz` once compressed."""
    return re.fullmatch(re.escape(name) + r"(\.[0-9]+)?(\.gz)?",
                        os.path.basename(pointer)) is not None


def _successor_down_the_chain(path: str, live: str) -> str | None:
    """The file that continues the vanished `path`, as it was named where it was live
    (beside `path`; it may be gone too), when the chain of `parentSession` pointers from
    `live` back through its archives passes through the archive of `path`: several
    rotations into an archive folder elsewhere leave nothing beside `path` naming it.
    The hop is checked as `lineage` checks it (the archive's seal names that successor);
    where retention removed the archive of `path`, the file naming it as parent is taken."""
    directory, name = os.path.split(path)
    current, seen = live, {live}
    for _ in range(MAX_HOPS):
        header = read_header(current)
        pointer = header.get("parentSession") if header else None
        if not isinstance(pointer, str) or not pointer:
            return None
        names_it = archive_name_of(name, pointer) and (
            os.path.normpath(os.path.join(directory, pointer)) != path)  # (not a fork)
        older = _parent_file(pointer, header.get("id") if header else None, current,
                             directory)
        if names_it and older is None and _archive_removed(name, pointer, directory):
            # the archive of `path` is gone (retention removed it): the file whose header
            # names it continues `path`, where it is now
            return current
        if older is None or older in seen:
            return None
        if names_it:
            seal = seal_of(older)
            successor = plain_name(seal.get("file")) if seal is not None else None
            if successor is None or header is None or seal is None or (
                    seal.get("sessionId") != header.get("id")):
                return None
            return os.path.join(directory, successor)
        seen.add(older)
        current = older
    return None


def _archive_removed(name: str, pointer: str, directory: str) -> bool:
    """Whether `pointer` is what rotation writes for the archive of the file `name` (a
    relative path to `<name>` or `<name>.gz`: never a fork's absolute pointer, nor a
    `<name>.N` of another file once named alike) and nothing is there or anywhere the
    archive moves through: retention removed it."""
    if os.path.isabs(pointer) or os.path.basename(pointer) not in names_of(name):
        return False
    there = names_of(os.path.normpath(os.path.join(directory, pointer)))
    return not any(os.path.lexists(c) for c in (*there, *_local_parents(pointer, directory)))


def resolve_live(path: str) -> tuple[str, list[str]]:
    """Follow seals (and archives) from `path` to the live file; also return the hops.

    Symbolic links are resolved first: the live file is returned by its real path.

    Raises:
        DamagedArchive: the way goes through a compressed archive that cannot be read (or
            `path` is one): which file is live cannot be told, and the archive is never
            given for it (a caller would write to, or tail, the wrong file).
    """
    walk = _walk_forward(path)
    if walk.damage is not None:
        raise walk.damage
    return walk.end, walk.hops


class _Walk(NamedTuple):
    end: str  # the live file; where the way is blocked, the damaged archive
    hops: list[str]
    damage: DamagedArchive | None = None
    before: str | None = None  # the readable sealed file the damaged archive continues


def _walk_forward(path: str) -> _Walk:
    """`resolve_live`'s walk, which stops at a damaged archive instead of raising."""
    current = real_path(path)
    hops: list[str] = []
    while True:  # ends: every hop goes to a file not visited yet
        if os.path.exists(current):
            sealed_at: str | None = current
            seal = seal_of(current)
            following = (successor_named_by(seal, current, current) if seal is not None
                         else _published_intent(current))
        else:
            following, sealed_at, seal = None, None, None
            for archived in archived_copies(current):
                if os.path.exists(archived):
                    sealed_at, seal = archived, seal_of(archived)
                    following = successor_named_by(seal, current, archived) if seal else None
                    break
            following = following or _child_by_header(current)
        if following is None and sealed_at is not None:
            blocked = _blocked_after(seal, current, sealed_at)
            if blocked is not None:
                before = (sealed_at if blocked.path != sealed_at
                          else hops[-1] if hops else None)
                return _Walk(blocked.path, hops, blocked, before)
        if following is None:
            return _Walk(current, hops)
        following = real_path(following)
        if following == current or following in hops:
            return _Walk(current, hops)
        hops.append(current)
        current = following


def _blocked_after(seal: dict[str, Any] | None, near: str, sealed_at: str
                   ) -> DamagedArchive | None:
    """Why the way on from `sealed_at` (the file live at `near`, or its archive) is blocked
    by damage: it is an unsealed archive that cannot be read, or its seal names a successor
    found only as an archive that cannot be read. None where it is not."""
    if seal is None:
        reason = archive_damage(sealed_at)
        return None if reason is None else DamagedArchive(sealed_at, reason, after=True)
    for candidate, _ in _successor_candidates(seal, near, sealed_at):
        found = _where_now(candidate)
        reason = archive_damage(found) if found is not None else None
        if found is not None and reason is not None:
            return DamagedArchive(real_path(found), reason, after=True)
    return None


def archive_damage(path: str) -> str | None:
    """Why the compressed archive `path` cannot be read to its end (`not a readable gzip
    archive (...)`, or the system's reason), or None: it can, or it is no archive. Its seal
    and header are in it: one that cannot be read blocks the way through its lineage."""
    if not is_compressed(path):
        return None
    try:
        with read_regular(path) as packed, archivegz.reader(packed) as f:
            while f.read(archivegz.CHUNK):
                pass
    except archivegz.DAMAGE as e:
        return f"{archivegz.DAMAGED} ({e})"
    except OSError as e:
        return describe_os_error(e)
    return None


def pending_successor(path: str) -> str | None:
    """The successor an interrupted rotation of `path` published, if any (the file that
    continues it, even before the old file is sealed)."""
    return _published_intent(path)


def _published_intent(path: str) -> str | None:
    """An interrupted rotation whose successor was published counts as a seal: the next
    writer finishes it (see `recover_rotation`), so readers follow it already."""
    try:
        intent = read_intent(path)
    except (OSError, BadIntent):
        return None
    if intent is None or file_key(intent.successor) is None:
        return None
    return intent.successor


@dataclass(frozen=True)
class Traced:
    """A lineage as far as it can be followed (`trace`).

    `files`: oldest first; a damaged archive that stopped the walk is among them, at the
    end it blocked. `live`: the live file, None where the way to it is blocked. `damaged`:
    each damaged archive that stopped the walk (the one blocking the way to the live file
    first): where there is one, the lineage may go on past it.
    """

    files: list[str]
    live: str | None
    damaged: list[DamagedArchive]


def trace(path: str) -> Traced:
    """Every file of the lineage of `path` that can be found, and the damaged archives that
    stop the search (`Traced`): for a reader that says what it could not follow rather than
    refusing (`journal lineage`, `ls`, `export`). `lineage` refuses instead."""
    walk = _walk_forward(path)
    if walk.damage is None:
        files, back = _walk_back(walk.end)
        return Traced(files, walk.end, [back] if back else [])
    if walk.before is None:
        return Traced([walk.end], None, [walk.damage])
    files, back = _walk_back(walk.before)
    return Traced([*files, walk.end], None, [walk.damage, *([back] if back else [])])


def trace_to_live(path: str) -> Traced:
    """`trace`, for a reader that goes on without what a damaged archive behind the live
    file hides, but must know the live file: DamagedArchive where the way to it is blocked
    (which file is live cannot be told)."""
    traced = trace(path)
    if traced.live is None and traced.damaged:
        raise traced.damaged[0]
    return traced


def lineage(path: str) -> list[str]:
    """Every file of the lineage, from the first archived one to the live one, however many
    rotations it went through.

    `parentSession` pointers are read relative to the live file's folder first; an absolute
    one (older versions) only counts if the file there continues into this lineage.

    Raises:
        DamagedArchive: a compressed archive of it cannot be read, so the files on one side
            of it cannot be found (`trace` gives those that can).
    """
    traced = trace(path)
    if traced.damaged:
        raise traced.damaged[0]
    return traced.files


def _walk_back(live: str) -> tuple[list[str], DamagedArchive | None]:
    """The files `live` continues, oldest first, `live` last, back to the first one or to a
    damaged archive (included), which is returned with them."""
    folder = os.path.dirname(live)
    chain = [live]
    seen = {live}
    current = live
    while True:  # ends: every hop goes to a file not visited yet
        header = read_header(current)
        if header is None:
            # a rotation may have moved it into the archive, or compressed it, since it was
            # found
            later = [*archived_copies(current), *names_of(current)[1:]]
            moved = next((a for a in later if os.path.isfile(a)), None)
            if moved is not None and moved not in seen:
                chain[-1] = current = moved
                seen.add(moved)
                header = read_header(current)
        parent = header.get("parentSession") if header else None
        if not isinstance(parent, str) or not parent:
            break
        found = _parent_file(parent, header.get("id") if header else None, current, folder)
        if found is None or found in seen:
            break
        chain.append(found)
        seen.add(found)
        current = found
        reason = archive_damage(found) if seal_of(found) is None else None
        if reason is not None:
            chain.reverse()
            return chain, DamagedArchive(found, reason, after=False)
    chain.reverse()
    return chain, None


def live_name(archive_name: str) -> str:
    """The name a session archived as `archive_name` had while it was live: without `.gz`
    and without the number rotation adds to a name taken in the archive (`<name>.2`)."""
    plain = uncompressed_name(archive_name)
    numbered = _NUMBERED.fullmatch(plain)
    return numbered.group(1) if numbered else plain


def live_names(chain: list[str]) -> list[str]:
    """The files of a lineage (as `lineage` lists them, the live one last) by the names they
    had while they were live: beside the live file, where each one's rotation made its
    successor before it moved it into an archive (its inbox, `inbox_path`, is there). A name
    another file holds now (a new session made there once the rotation freed it) is that
    session's, and is left out."""
    if not chain:
        return []
    folder = os.path.dirname(chain[-1])
    older = []
    for f in chain[:-1]:
        name = os.path.join(folder, live_name(os.path.basename(f)))
        if not os.path.lexists(name) or same_file(name, f):
            older.append(name)
    return [*older, chain[-1]]


def parent_of(path: str, header: Entry | None = None) -> str | None:
    """The file `path` continues (its archived predecessor, where it is now), if any.
    `header` saves reading it again when the caller has it."""
    if header is None:
        header = read_header(path)
    parent = header.get("parentSession") if header else None
    if not isinstance(parent, str) or not parent:
        return None
    return _parent_file(parent, header.get("id") if header else None, path,
                        os.path.dirname(path))


def _local_parents(parent: str, folder: str) -> list[str]:
    """Where the file a `parentSession` pointer names may be in `folder`'s reach: in the
    order a file moves through while it is archived (beside its successor, then the archive,
    then compressed), so a file that moves on during a search is met again."""
    base = uncompressed_name(os.path.basename(parent))
    archives = [os.path.join(folder, ARCHIVE_DIR)]
    if not os.path.isabs(parent):
        archives.insert(0, os.path.normpath(os.path.join(folder, os.path.dirname(parent))))
    local = [os.path.join(folder, base), *(os.path.join(a, base) for a in archives),
             *(compressed_name(os.path.join(a, base)) for a in archives),
             # compressed beside it: archives exported together into one folder
             compressed_name(os.path.join(folder, base))]
    return list(dict.fromkeys(local))


def _parent_file(parent: str, child_id: object, child: str, folder: str) -> str | None:
    """The file a `parentSession` pointer names, if it really continues into `child`: one
    sealed into it wherever it is found, else the first unsealed one (a fork's parent). A
    rotated session's unsealed copy left at its old name (beside the successor, where the
    search looks first) is not taken for the archive its seal is in."""
    fork: str | None = None
    found: list[tuple[str, str | None]] = [(c, None) for c in _local_parents(parent, folder)]
    if os.path.isabs(parent):
        found += [(v, child) for v in names_of(os.path.normpath(parent))]
    for candidate, leading_to in found:
        if not os.path.isfile(candidate):
            continue
        link = _link(candidate, child_id, leading_to)
        if link == SEALED_INTO:
            return candidate
        if link == FORKED_FROM and fork is None:
            fork = candidate
    return fork


SEALED_INTO, FORKED_FROM = "sealed into", "forked from"


def _link(candidate: str, child_id: object, child: str | None) -> str | None:
    """How `candidate` is the parent of the session `child_id`: SEALED_INTO when its seal
    names that session (and, when `child` is given, leads to that very file), FORKED_FROM
    when it is not sealed (a fork's parent); None when it is sealed into another."""
    seal = seal_of(candidate)
    if seal is None:
        return FORKED_FROM
    if seal.get("sessionId") not in (None, child_id):
        return None
    if child is None:
        return SEALED_INTO
    successor = successor_named_by(seal, candidate, candidate)
    return SEALED_INTO if successor is not None and same_file(successor, child) else None


# intent files: crash recovery of a rotation


INBOX_SUFFIX = ".inbox"
"""The folder beside a session file into which other programs queue messages for the agent
working on it (`<file>.inbox/`, one file a message; format.md § 9.7). Pruning never removes a
session whose inbox holds a message."""


def inbox_path(path: str) -> str:
    """The inbox folder of the session `path` (see `INBOX_SUFFIX`): beside a session file;
    for a database session, which has no folder, one on this machine in this user's own
    folder for them (`database_inboxes`), named by a hash of the database's identity (read
    from the server: `journal.pg.connect.database_identity`) and the session's id, so that
    every spelling of its URL leads to it: an agent working on the session on this machine
    reads it, one on another machine does not."""
    if is_database_url(path):
        from .pg.connect import database_identity

        parsed = parse_url(path)
        key = f"{database_identity(parsed.conninfo)}/{parsed.session}"
        name = hashlib.sha256(key.encode()).hexdigest()[:40]
        return os.path.join(database_inboxes(), name + INBOX_SUFFIX)
    return path + INBOX_SUFFIX


def database_inboxes() -> str:
    """This user's folder for the inboxes of database sessions (`$XDG_RUNTIME_DIR`, else the
    temporary folder), made private; UnsafeFile where it is not this user's own private
    folder (another user made it, to read or plant messages)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    root = os.path.join(base, f"journal-inboxes-{os.getuid()}")
    make_private_dir(root, follow=False)
    st = os.lstat(root)
    if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise UnsafeFile(root, "is not this user's own private folder (owner "
                         f"{st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}); remove it, or set "
                         "XDG_RUNTIME_DIR to a folder of your own")
    return root


def intent_path(path: str) -> str:
    return path + INTENT_SUFFIX


def write_intent(path: str, intent: dict[str, Any]) -> None:
    """Record a rotation's plan: written whole under a fresh name, then renamed into place
    (a crash leaves the old intent or the new one, and a planted link is replaced, not
    written through)."""
    publish_bytes(intent_path(path), orjson.dumps(intent) + b"\n", "intent",
                  name=temp_path_for(path, "intent"))


def remove_intent(path: str) -> None:
    try:
        os.unlink(intent_path(path))
    except FileNotFoundError:
        return
    fsync_directory(os.path.dirname(path))


def read_intent(path: str) -> Intent | None:
    """The validated intent of an interrupted rotation of `path` (a real path), or None if
    there is none; raises `BadIntent` for one that this session's rotation cannot have
    written (see `journal.intent`). A successor already published must carry the intent's
    session id and name the intent's archive as its parent."""
    try:
        fd = os.open(intent_path(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise BadIntent(f"cannot be read safely ({e.strerror or e})") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadIntent("not a regular file")
        data = os.read(fd, MAX_INTENT_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_INTENT_BYTES:
        raise BadIntent("too large to be an intent")
    intent = parse_intent(path, data)
    if os.path.lexists(intent.successor):
        if file_key(intent.successor) is None:
            raise BadIntent(f"successor {intent.successor} is not a regular file")
        header = read_header(intent.successor)
        if header is None or header.get("id") != intent.session_id:
            raise BadIntent(f"successor {intent.successor} is not session {intent.session_id}")
        parent = header.get("parentSession")
        if not isinstance(parent, str) or not _names_archive(path, parent, intent.archive):
            raise BadIntent(f"successor {intent.successor} does not name this session's "
                            "archive as its parent")
        if not _copied_from(path, intent.successor):
            raise BadIntent(f"successor {intent.successor} holds no entries of this session")
    return intent  # unpublished: only the temp file is acted on (removed), never the archive


def _names_archive(path: str, parent: str, archive: str | None) -> bool:
    """Whether a successor's `parentSession` names the archive its intent gives (compressed or
    not), or, for an intent without one, a file carrying this session's name."""
    named = uncompressed_name(os.path.normpath(os.path.join(os.path.dirname(path), parent)))
    if archive is None:
        return os.path.basename(named).startswith(os.path.basename(path))
    directory, name = os.path.split(named)
    return os.path.join(real_path(directory), name) == archive


def _copied_from(path: str, successor: str) -> bool:
    """Whether `successor` continues `path`: rotation copies the kept entries with their ids
    (a `model_change` it makes from an assistant message is new), so a planted file that only
    names itself the successor fails."""
    try:
        copied = load(successor).entries
        if not os.path.exists(path):
            return True  # already archived: nothing of this file is left to protect
        known = scan_ids(path)
    except (OSError, EOFError, JournalError):
        return False
    ids = [e.get("id") for e in copied if e.get("type") != "model_change"]
    return bool(ids) and all(isinstance(i, str) and len(i) == 8 and _hex_in(i, known)
                             for i in ids)


def _hex_in(entry_id: str, known: set[int]) -> bool:
    try:
        return int(entry_id, 16) in known
    except ValueError:
        return False


def recover_rotation(path: str) -> str | None:
    """Finish or undo a rotation of `path` that a crash interrupted. Caller holds the lock.

    Until the successor is published under its final name, the old file stays authoritative:
    the temp file is removed. From then on the successor is (it was verified before it was
    published): the old file is sealed if it is not yet, and moved to the archive. Returns
    what was done, or None if there was nothing to recover. An intent that this session's
    rotation cannot have written (see `read_intent`) is reported, removed and not acted on.
    """
    try:
        intent = read_intent(path)
    except BadIntent as e:
        log.warning("%s: ignored the rotation intent %s (%s); it is removed and nothing "
                    "else was changed", path, intent_path(path), e)
        try:
            remove_intent(path)
        except OSError as gone:
            log.warning("%s: could not remove it (%s)", intent_path(path), gone)
        return f"ignored: {e}"
    if intent is None:
        return None
    published = file_key(intent.successor) is not None
    if intent.temp is not None and os.path.lexists(intent.temp):
        os.unlink(intent.temp)
    if not published:
        action = "undone: the old file stays authoritative"
    else:
        archive = intent.archive
        if archive is not None and not inside(os.path.dirname(archive), os.path.dirname(path)):
            # a recovery never moves a file out of its folder (an intent may be planted): an
            # archive folder elsewhere is replaced by the default one, which lineage also reads
            archive = os.path.join(os.path.dirname(path), ARCHIVE_DIR,
                                   os.path.basename(archive))
        try:
            if os.path.exists(path) and seal_of(path) is None:
                seal_file(path, intent.successor, intent.session_id, archive)
        except (OSError, JournalError) as e:
            # the intent stays (readers and writers follow it to the successor, which is
            # authoritative): reported here and by `journal info`, retried by the next writer
            log.warning("%s: an interrupted rotation could not be finished (sealing failed: "
                        "%s); %s stays and the session goes on in %s", path, e,
                        intent_path(path), intent.successor)
            return "pending: the successor is live; sealing the old file failed"
        action = "finished: the successor is live and the old file is archived"
        if os.path.exists(path) and archive is not None:
            try:  # a crash between the archive's link and the old name's removal: finished
                move_into_archive(path, archive)
            except FileExistsError:
                log.warning("%s: not archived: %s already exists", path, archive)
                action = "finished: the successor is live; the old file stays, sealed"
            except (OSError, JournalError) as e:
                log.warning("%s: not archived (%s); it stays, sealed, where it is", path, e)
                action = "finished: the successor is live; the old file stays, sealed"
    fsync_directory(os.path.dirname(path))
    remove_intent(path)
    log.warning("%s: an interrupted rotation was %s", path, action)
    return action


def seal_file(path: str, successor: str, session_id: str, archive: str | None = None) -> Entry:
    """Append the `journal.successor` marker to a file whose writer lock the caller holds."""
    from .quarantine import cut_torn_tail

    cut_torn_tail(path)
    last = last_entry(path)
    marker = make_seal(set(), last.get("id") if last else None, successor, session_id, archive)
    write_seal(path, marker)
    return marker


def pending_rotations(path: str) -> list[str]:
    """Files whose interrupted rotation concerns `path`: itself, and its parent if `path` is
    the successor that parent's rotation published."""
    found = [path] if os.path.lexists(intent_path(path)) else []
    header = read_header(path) if os.path.exists(path) else None
    parent = header.get("parentSession") if header else None
    if isinstance(parent, str):
        name = uncompressed_name(os.path.basename(parent))
        beside = os.path.join(os.path.dirname(path), name)
        if os.path.lexists(intent_path(beside)) and _publishes(beside, path):
            found.insert(0, beside)
    return found


def _publishes(parent: str, path: str) -> bool:
    """Whether the interrupted rotation of `parent` is the one that published `path` (a fork
    of `parent` names it too, but its rotation is not this file's); a damaged intent is
    taken to be, so that it is said rather than passed over."""
    try:
        intent = read_intent(real_path(parent))
    except BadIntent:
        return True
    return intent is not None and os.path.basename(intent.successor) == os.path.basename(path)


def pending_note(path: str) -> str | None:
    """An interrupted rotation that concerns `path` (`pending_rotations`: its own, or that
    of the file it continues), said as what is pending and what finishes it; None if none."""
    found = pending_rotations(path)
    if not found:
        return None
    return (f"an interrupted rotation is pending ({intent_path(found[0])}): 'journal repair' "
            "or 'journal rotate' finishes it")


def move_into_archive(path: str, archive: str) -> None:
    """Move a sealed file (the caller holds its lock) and its side files into the archive.

    Its backup and quarantine go along as `<archive>.bak` and `<archive>.quarantine`; its
    lock file goes when the lock is released (see `release_after_move`).
    """
    directory, name = os.path.split(archive)
    ensure_archive_folder(path, directory)
    # the moves go into the folder just checked, even if its name is swapped for a link
    folder = open_folder(directory, follow=not is_default_archive(path, directory))
    try:
        _place(path, name, archive, folder)
        _place_side_files(path, name, archive, folder)
        os.fsync(folder)
    finally:
        os.close(folder)
    fsync_directory(os.path.dirname(path))


def move_side_files_into_archive(path: str, archive: str) -> None:
    """Move the backup and quarantine of `path` into the archive as `move_into_archive`
    moves them (`<archive>.bak`, `<archive>.quarantine`), the file itself staying where it
    is: for a copy of a session whose archive holds its bytes already (`journal pull` after
    a rotation), which the caller then removes. Each is moved whole or not at all; one whose
    name is taken in the archive stays (a warning)."""
    directory, name = os.path.split(archive)
    if not any(os.path.lexists(path + suffix) for suffix in _SIDE_SUFFIXES):
        return
    ensure_archive_folder(path, directory)
    folder = open_folder(directory, follow=not is_default_archive(path, directory))
    try:
        _place_side_files(path, name, archive, folder)
        os.fsync(folder)
    finally:
        os.close(folder)
    fsync_directory(os.path.dirname(path))


_SIDE_SUFFIXES = (".bak", ".quarantine")


def _place_side_files(path: str, name: str, archive: str, folder: int) -> None:
    for suffix in _SIDE_SUFFIXES:
        side = path + suffix
        if os.path.lexists(side) and stat.S_ISREG(os.lstat(side).st_mode):
            try:
                _place(side, name + suffix, archive + suffix, folder)
            except FileExistsError:
                log.warning("%s: not moved into the archive: %s already exists", side,
                            archive + suffix)


def ensure_archive_folder(path: str, folder: str) -> None:
    """Create the archive folder of `path` (0700) if needed. The default one, `archive/`
    beside the file, must be a real folder: a link planted there would carry the session
    out of its folder (UnsafeFile). A folder the caller chose may be a link."""
    make_private_dir(folder, follow=not is_default_archive(path, folder))


def is_default_archive(path: str, folder: str) -> bool:
    """Whether `folder` is the default archive folder of the session `path` (which the store
    owns, so a link there is refused) rather than one the caller chose."""
    return os.path.abspath(folder) == os.path.join(os.path.dirname(os.path.abspath(path)),
                                                   ARCHIVE_DIR)


def release_after_move(lock: Lock, path: str) -> None:
    """Release the writer lock of `path`, removing its lock file if the file moved away.

    Called last, when nothing is left to do under the lock: whoever takes the lock after
    that (on a fresh lock file) finds the file gone and follows its seal, so no lock file is
    left beside the archived sessions.
    """
    try:
        if not os.path.lexists(path):
            remove_if_regular(lock_path_for(path))
    finally:
        lock.release()


def _place(path: str, name: str, archive: str, folder: int) -> None:
    """Move `path` to `name` in the archive folder, never over a file already there: an
    archive folder chosen by the caller may be shared by sessions whose files have the same
    name, and two rotations may pick the same free name at once (FileExistsError for the
    second). The name already being `path` itself (a crash between link and unlink) finishes
    the move."""
    try:
        linked = link_no_replace(path, name, dst_dir_fd=folder)
    except FileExistsError:
        if not os.path.samestat(os.lstat(path), os.lstat(name, dir_fd=folder)):
            raise
        linked = True
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        _copy_across(path, archive, folder)
        linked = True
    if linked:
        os.unlink(path)
    else:  # no hard links on this file system: the name was looked at, then renamed onto
        os.rename(path, name, dst_dir_fd=folder)


def _copy_across(path: str, archive: str, folder: int) -> None:
    """Copy to another file system: a new file (never through a link), same permissions,
    never over an existing archive."""
    with read_regular(path) as src, NewFile(archive, "archive", like=os.fstat(src.fileno()),
                                            dir_fd=folder) as new:
        while chunk := src.read(1 << 22):
            new.write(chunk)
        new.publish(replace=False)


def recover_pending(path: str, lock_timeout: float) -> list[str]:
    """Recover every interrupted rotation on the way from `path` to the live file; what was
    done with each (`PATH: finished: ...`, see `recover_rotation`)."""
    current = real_path(path)
    done: list[str] = []
    for _ in range(MAX_HOPS):
        for pending in pending_rotations(current):
            lock = WriterLock(pending, lock_timeout)
            lock.acquire()
            try:
                action = recover_rotation(pending)
            finally:
                release_after_move(lock, pending)
            if action is not None:
                done.append(f"{pending}: an interrupted rotation was {action}")
        live, hops = resolve_live(current)
        if live == current:
            return done
        current = live
    return done
