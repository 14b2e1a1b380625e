"""The entries of a lineage, read as a stream: one entry in memory at a time.

`LineageStream(files)` walks the files of a lineage oldest first (archives in `.gz`
included; a Claude Code transcript is read by `journal.claude`, with its subagent files) and
yields each entry once (a successor repeats the kept entries of its
predecessor), leaving out the rotation seals; it can be walked again (a second pass gives
the same entries). A version 3 file is streamed line by line; a version 1 or 2 file (whose
ids come from migration) or one whose first line is no header is read whole by `load`.

What cannot be read becomes a warning: a damaged line, an archive that is no session, or a
database archive moved out to a file not on this machine (`journal rotate --keep`). The
live file (the last one) must be a readable session: `NotASession` otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import IO

from . import archivegz, codec
from .archivegz import is_compressed
from .codec import Diagnostic
from .errors import ArchiveElsewhere, NotASession
from .header import is_header, stream_first_line
from .model import CURRENT_VERSION, Entry, header_version
from .pg.url import shown, shown_in
from .seal import is_seal
from .snapshot import load, open_for_reading, require_session

__all__ = ["LineageStream"]


class LineageStream:
    """The entries of the lineage `files` (oldest first, the live one last)."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = list(files)
        self.header: Entry | None = None
        """The first file's header (set by a walk)."""
        self.live_leaf: str | None = None
        """The id of the live file's last entry that is no seal (set by a walk)."""
        self.warnings: list[str] = []
        """What the last walk could not read."""
        self.title: str | None = None
        """A Claude Code transcript's title (its latest `ai-title` or `summary`)."""
        self.subagent_files: list[str] = []
        """A Claude Code transcript's subagent files, read with it (set by a walk)."""

    def entries(self) -> Iterator[Entry]:
        """Every entry of the lineage once, in file order, seals left out."""
        self.warnings = []
        self.header = None
        self.live_leaf = None
        self.subagent_files = []
        seen: set[str] = set()
        live = self.files[-1]
        self._leaf: str | None = None
        for path in self.files:
            try:
                for entry in self._file(path, path == live):
                    if is_seal(entry):
                        continue
                    if path == live:
                        self.live_leaf = entry["id"]
                    if entry["id"] in seen:
                        continue
                    seen.add(entry["id"])
                    yield entry
            except ArchiveElsewhere as e:
                if path == live:
                    raise
                self.warnings.append(elsewhere_warning(e))
            except (NotASession, OSError) as e:
                if path == live:
                    raise
                self.warnings.append(shown_in(f"{path}: not read ({e})", path))
        if self._leaf is not None:  # a Claude Code transcript names its leaf itself
            self.live_leaf = self._leaf

    def _file(self, path: str, is_live: bool) -> Iterator[Entry]:
        with open_for_reading(path) as raw:
            if not is_compressed(path):
                yield from self._stream(path, raw, is_live)
                return
            with archivegz.unpacked(raw, path) as unpacked:
                yield from self._stream(path, unpacked, is_live)

    def _stream(self, path: str, f: IO[bytes], is_live: bool) -> Iterator[Entry]:
        first = stream_first_line(f)
        if first.header is None or header_version(first.header) != CURRENT_VERSION:
            yield from self._loaded(path, is_live)
            return
        if self.header is None:
            self.header = first.header
        with codec.bulk_parsing():
            for item in codec.iter_lines(f, first.end, first_line=2):
                if isinstance(item, Diagnostic):
                    self._warn(path, item)
                    continue
                value = codec.parse_line(item)
                if value is None:
                    continue
                if isinstance(value, Diagnostic):
                    self._warn(path, value)
                    continue
                if is_header(value):
                    self._warn(path, Diagnostic(item.offset, len(item.raw), codec.EXTRA_HEADER,
                                                item.number,
                                                "a session header after the first line"))
                    continue
                problem = codec.check_entry(value, CURRENT_VERSION)
                if problem is not None:
                    self._warn(path, Diagnostic(item.offset, len(item.raw),
                                                problem.split(":")[0], item.number, problem))
                    continue
                yield value

    def _loaded(self, path: str, is_live: bool) -> Iterator[Entry]:
        snap = load(path)
        require_session(snap)
        if self.header is None and snap.claude is not None:  # a Claude Code transcript
            read = snap.claude
            self.header = {"type": "session", "id": read.first("sessionId"),
                           "cwd": read.first("cwd"), "timestamp": read.first("timestamp")}
            self.title = read.title
            self._leaf = read.leaf_id
            self.subagent_files = list(read.subagent_files)
        if self.header is None:
            self.header = snap.header
        for d in snap.diagnostics:
            self._warn(path, d)
        yield from snap.entries

    def _warn(self, path: str, d: Diagnostic) -> None:
        where = d.file if d.file is not None else path  # a subagent file names itself
        self.warnings.append(f"{shown(where)}: line {d.line or '?'}: {d.reason} ({d.detail})")


def elsewhere_warning(e: ArchiveElsewhere) -> str:
    """The warning for a database archive left out of an export because its file is not
    here, worded as `journal usage` and `journal ls` word theirs ("not counted: ...")."""
    said = str(e).removeprefix(f"{e.locator}: ")
    return f"{e.locator}: not exported: {said}"
