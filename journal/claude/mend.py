"""`journal repair` on a Claude Code transcript: the same guarantees as for a pi file.

The plan (`journal.claude.mendplan`) is verified before anything is written: every rewritten
line parses, and planning the new bytes again finds nothing to do (so a second repair changes
nothing). Then, under the writer lock, every dropped or rewritten byte range goes to
`<file>.quarantine`, the original stays as `<file>.bak`, and the new file replaces it in one
atomic swap (`Storage.publish`). A file that needs nothing is not touched. Claude Code
does not take the writer lock: if the transcript grew while it was repaired, nothing is
changed (its new lines would be lost) and the repair says so.
"""

from __future__ import annotations

import os

from ..archivegz import is_compressed
from ..errors import JournalError, NotASession
from ..files import remove_leftovers, require_space
from ..identity import real_path
from ..live import check_single_name, lock_live
from ..lock import DEFAULT_LOCK_TIMEOUT
from ..progress import Progress
from ..publish import link_as
from ..quarantine import quarantine, quarantine_path_for
from ..repair_report import BACKUP_SUFFIX, Problem, RepairReport
from ..snapshot import refuse_misread
from ..storage import as_storage
from .detect import CLAUDE
from .mendplan import NOT_A_RECORD, MendPlan, plan_bytes, plan_claude

DIALECT = "claude"
REPAIR_TAG = "repair"


def assess_claude(path: str | os.PathLike[str], *,
                  progress: Progress | None = None) -> RepairReport:
    """What `repair_claude` would find and do, without a lock and without writing."""
    path = real_path(path)
    p = plan_claude(path, progress)
    p.meter.finish()
    return _report(p, path, dry_run=True)


def repair_claude(path: str | os.PathLike[str], *, dry_run: bool = False,
                  lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
                  progress: Progress | None = None) -> RepairReport:
    """Repair a Claude Code transcript in place, in Claude Code's own format.

    Takes the writer lock; keeps one backup at `<path>.bak`; appends every dropped or rewritten
    byte range to `<path>.quarantine`; swaps atomically. `dry_run` reports only.

    Example:
        >>> report = repair_claude("~/.claude/projects/p/s.jsonl")  # doctest: +SKIP
        >>> report.counts
    """
    path = real_path(path)
    if os.path.isdir(path):
        raise NotASession(path, "is a directory; pass the transcript files it holds")
    as_storage(path).open_reader().close()  # missing or unreadable: said before any lock
    refuse_misread(path, CLAUDE)
    if dry_run:
        return assess_claude(path, progress=progress)
    if is_compressed(path):
        raise NotASession(path, "a compressed file is read-only; check it with --check")
    path, lock, _ = lock_live(path, lock_timeout, recover=False, follow_seals=False)
    try:
        remove_leftovers(path)
        check_single_name(path)
        p = plan_claude(path, progress)
        report = _report(p, path, dry_run=False)
        if report.changed:
            _publish(p, path, p.size)
            report.backup = path + BACKUP_SUFFIX
            if p.dropped or p.rewritten():
                report.quarantine = quarantine_path_for(path)
        p.meter.finish()
        return report
    finally:
        lock.release()


def _report(p: MendPlan, path: str, *, dry_run: bool) -> RepairReport:
    # JSON values and not one record: no transcript. Bytes no reader can parse alone (a
    # first record torn by a crash) are quarantined, as anywhere else; an empty file is clean
    if not p.records and any(q.kind == NOT_A_RECORD for q in p.problems):
        raise NotASession(path, "not a transcript: nothing in it is a Claude Code record")
    rewritten = [Problem(r.reason or "rewritten", "rewritten; original bytes quarantined",
                         r.line, r.offset, r.uuid)
                 for r in p.records if r.original is not None and not r.dropped]
    return RepairReport(path, bool(p.problems), p.problems, 0, dry_run=dry_run,
                        rewritten=rewritten, consequences=p.consequences, dialect=DIALECT)


def _publish(p: MendPlan, path: str, size: int) -> None:
    data = p.render()
    _verify(p, data)
    items = p.dropped + p.rewritten()
    require_space(path, len(data) + sum(2 * len(q.data) + 256 for q in items))

    def before_swap() -> None:
        # Claude Code does not take our lock: if it appended meanwhile, its lines would be lost
        if os.stat(path).st_size != size:
            raise JournalError(f"{path}: the transcript changed while it was repaired (is "
                               "Claude Code running on it?); nothing was changed, try again "
                               "once it has stopped")
        quarantine(path, items)
        link_as(path, path + BACKUP_SUFFIX)

    as_storage(path).publish(data, REPAIR_TAG, before_swap)


def _verify(p: MendPlan, data: bytes) -> None:
    """The new bytes must need no repair themselves, or nothing is written."""
    again = plan_bytes(data, p.path)
    if again.problems:
        first = again.problems[0]
        what = first.detail or first.action
        raise JournalError(f"{p.path}: repair would leave {first.kind} ({what}) behind; "
                           "nothing was changed")
    if len(again.records) != len(p.kept()):
        raise JournalError(f"{p.path}: repair would not give back its own records; nothing was "
                           "changed")


__all__ = ["assess_claude", "repair_claude"]
