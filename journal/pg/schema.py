"""The database schema of the PostgreSQL backend, its version table and its migrations.

Everything lives in the schema `journal` (docs/postgres.md has the tables column by column):

- `journal.schema_version`: one row per migration applied (version, when, what);
- `journal.streams`: one row per session: its id (the URL's `session`), the current
  generation (a replacement starts a new one; NULL while a writer holds the session's lease
  before creating it), size in bytes and number of entries as of its last batch (a live
  session's end is its last line's, `STREAM_END`), the fencing epoch and who holds the
  lease, and the byte offsets of the latest compaction, model change and thinking-level change
  and where that compaction's kept entries start (what a resume needs, so it reads only the
  tail);
- `journal.entries`: one row per line, stored verbatim as text (never jsonb, which reorders
  keys) with its stream, generation, gap-free position, byte offset, and the entry's id,
  parentId and type as columns;
- `journal.append(...)`: the one-round-trip append (see `journal.pg.storage`), and
  `APPEND_ONE`, the lease holder's commit of one plain entry as a single statement (its fast
  path); `STREAM_END`, where a session ends (its last line).

`ensure(conn)` brings a database up to `VERSION`, each migration in its own transaction, under
a transaction-level advisory lock so that two processes starting at once do not both migrate.
A migration is append-only: a released one is never edited, a change is a new one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import JournalError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import psycopg

__all__ = ["ANNOUNCE_IF_FOLLOWED", "APPEND_LOOKING", "APPEND_LOOKING_TYPES", "APPEND_ONE",
           "APPEND_ONE_TYPES", "GRANTS_DOC", "MIGRATIONS", "RESUME_TYPES", "STREAMS_WITH_END",
           "STREAM_END", "VERSION", "SchemaError", "current_role", "current_version", "ensure"]

# pg_advisory_xact_lock key taken while migrating ("journal!" as a big-endian int64)
MIGRATION_LOCK = 0x6A6F75726E616C21

SQLSTATE_NO_SESSION = "JN001"
SQLSTATE_FENCED = "JN002"
SQLSTATE_SEALED = "JN003"

_V1 = """
CREATE SCHEMA IF NOT EXISTS journal;

CREATE TABLE journal.schema_version (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    description text NOT NULL
);

-- generations are unique across the database, so a mark never repeats
CREATE SEQUENCE journal.generations;

CREATE TABLE journal.streams (
    id                 bigserial PRIMARY KEY,
    session            text NOT NULL UNIQUE,
    generation         bigint,
    size               bigint NOT NULL DEFAULT 0,
    entries            bigint NOT NULL DEFAULT 0,
    epoch              bigint NOT NULL DEFAULT 0,
    holder_host        text,
    holder_pid         integer,
    holder_since       timestamptz,
    holder_backend     integer,
    last_compaction    bigint,
    last_kept          bigint,
    last_model_change  bigint,
    last_thinking_change bigint,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE journal.entries (
    -- streams.id; no foreign key: its check (a FOR KEY SHARE probe of the stream row per
    -- inserted line) cost a fifth of an append's server time, and every insert already holds
    -- that row (journal.append's update, publish's FOR UPDATE, create's insert). Deleting a
    -- stream deletes its lines (streams_deleted below).
    stream      bigint NOT NULL,
    generation  bigint NOT NULL,
    position    bigint NOT NULL,
    byte_offset bigint NOT NULL,
    id          text,
    parent_id   text,
    type        text,
    line        text NOT NULL,
    -- the one index: every read is by byte offset, and with a single index the planner has
    -- no other to pick before the table has statistics (a fresh, fast-growing table)
    PRIMARY KEY (stream, generation, byte_offset)
);

-- what ON DELETE CASCADE did: a deleted stream's lines go with it, in the same transaction
CREATE FUNCTION journal.delete_lines() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM journal.entries WHERE stream = OLD.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER streams_deleted AFTER DELETE ON journal.streams
    FOR EACH ROW EXECUTE FUNCTION journal.delete_lines();

-- Append one batch: lock the stream row, check the writer's epoch, acknowledge a retried
-- batch that is already the session's last, else insert the lines at the next positions
-- and offsets.
-- Returns the byte offset the batch starts at.
CREATE FUNCTION journal.append(
    p_session text, p_epoch bigint, p_lines text[], p_ids text[], p_parents text[],
    p_types text[], p_offsets bigint[], p_total bigint, p_kept text
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint := coalesce(cardinality(p_lines), 0);
    sid bigint;
    gen bigint;
    cur_epoch bigint;
    old_size bigint;
    old_entries bigint;
    found_id text;
    start_offset bigint;
    kept_offset bigint;
    compaction_at bigint;
    model_at bigint;
    thinking_at bigint;
BEGIN
    -- the row lock that serializes appends (and waits for a lease takeover's epoch change),
    -- taken by moving the size on at once; any refusal below rolls it back. Only the columns
    -- used are returned (scalars: no row-type assembly per call).
    UPDATE journal.streams SET size = size + p_total, entries = entries + n,
                               updated_at = now()
        WHERE session = p_session AND generation IS NOT NULL
        RETURNING id, generation, epoch, size - p_total, entries - n
        INTO sid, gen, cur_epoch, old_size, old_entries;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no session % in this database', p_session
            USING ERRCODE = 'JN001';
    END IF;
    IF p_epoch IS NOT NULL AND cur_epoch <> p_epoch THEN
        RAISE EXCEPTION 'session %: the lease was taken over (epoch % is now %)',
            p_session, p_epoch, cur_epoch USING ERRCODE = 'JN002';
    END IF;
    IF n = 0 THEN
        RETURN old_size;
    END IF;
    -- A retry after a lost acknowledgement: the batch is already the session's last (the
    -- writer holds the lease, so nothing came after it). One primary-key probe at the offset
    -- it would start at; the bytes compared only when its first id is there.
    start_offset := old_size - p_total;
    IF start_offset >= 0 AND p_ids[1] IS NOT NULL THEN
        SELECT e.id INTO found_id FROM journal.entries e
            WHERE e.stream = sid AND e.generation = gen AND e.byte_offset = start_offset;
        IF found_id = p_ids[1] AND ARRAY(
            SELECT e.line FROM journal.entries e
            WHERE e.stream = sid AND e.generation = gen AND e.byte_offset >= start_offset
            ORDER BY e.byte_offset) = p_lines
        THEN
            UPDATE journal.streams SET size = old_size, entries = old_entries WHERE id = sid;
            RETURN start_offset;  -- acknowledged at the offset it has, stored once
        END IF;
    END IF;
    IF n = 1 THEN
        -- one entry per commit is the common case: a plain VALUES row, no unnest
        INSERT INTO journal.entries (stream, generation, position, byte_offset, id, parent_id,
                                     type, line)
            VALUES (sid, gen, old_entries, old_size, p_ids[1], p_parents[1], p_types[1],
                    p_lines[1]);
    ELSE
        INSERT INTO journal.entries (stream, generation, position, byte_offset, id, parent_id,
                                     type, line)
            SELECT sid, gen, old_entries + u.o - 1, old_size + u.rel, u.i, u.p, u.t, u.l
            FROM unnest(p_lines, p_ids, p_parents, p_types, p_offsets)
                 WITH ORDINALITY AS u (l, i, p, t, rel, o);
    END IF;
    -- a followed session's followers are told (on commit) here rather than by the
    -- streams_changed trigger of version 2, which appends do not fire: a row trigger on every
    -- commit cost more than this one probe (journal.followers is made by version 2; the
    -- migrations are applied together)
    IF EXISTS (SELECT 1 FROM journal.followers f
               WHERE f.session = p_session AND f.until > now()) THEN
        PERFORM pg_notify('journal_changes', p_session || ' ' || (old_entries + n));
    END IF;
    IF p_types && ARRAY['compaction', 'model_change', 'thinking_level_change'] THEN
        -- where a resume starts reading: the latest compaction, where its kept entries
        -- start, the latest settings
        SELECT max(old_size + x.rel) FILTER (WHERE x.t = 'compaction'),
               max(old_size + x.rel) FILTER (WHERE x.t = 'model_change'),
               max(old_size + x.rel) FILTER (WHERE x.t = 'thinking_level_change')
            INTO compaction_at, model_at, thinking_at
            FROM unnest(p_types, p_offsets) AS x (t, rel);
        IF compaction_at IS NOT NULL AND p_kept IS NOT NULL THEN
            -- the kept entry is recent: look in the last 8 MiB first (a primary-key range)
            SELECT e.byte_offset INTO kept_offset FROM journal.entries e
                WHERE e.stream = sid AND e.generation = gen
                  AND e.byte_offset >= old_size + p_total - 8388608 AND e.id = p_kept
                ORDER BY e.byte_offset DESC LIMIT 1;
            IF kept_offset IS NULL THEN
                SELECT e.byte_offset INTO kept_offset FROM journal.entries e
                    WHERE e.stream = sid AND e.generation = gen AND e.id = p_kept
                    ORDER BY e.byte_offset DESC LIMIT 1;
            END IF;
        END IF;
        UPDATE journal.streams SET
            last_compaction = coalesce(compaction_at, last_compaction),
            last_kept = CASE WHEN compaction_at IS NULL THEN last_kept ELSE kept_offset END,
            last_model_change = coalesce(model_at, last_model_change),
            last_thinking_change = coalesce(thinking_at, last_thinking_change)
        WHERE id = sid;
    END IF;
    RETURN old_size;
END
$$;
"""

# Operations (journal.pg.rotation, .repair, .watch, .transfer): where a sealed stream goes on,
# its file name for push and pull, the quarantine, and change notifications for followers.
_V2 = """
ALTER TABLE journal.streams
    ADD COLUMN successor   text,         -- the session that continues this one (sealed)
    ADD COLUMN sealed_at   timestamptz,
    ADD COLUMN file_name   text,         -- its file, relative to the folder `pull` writes
    ADD COLUMN exported_to text;         -- archive exported to this .jsonl.gz, rows dropped

CREATE TABLE journal.quarantine (
    id          bigserial PRIMARY KEY,
    session     text NOT NULL,
    generation  bigint,
    byte_offset bigint NOT NULL,
    reason      text NOT NULL,
    detail      text NOT NULL DEFAULT '',
    data        bytea NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX quarantine_by_session ON journal.quarantine (session, id);

-- A follower registers the sessions it follows here (and renews it); a change to a stream
-- someone follows is announced on commit: pg_notify('journal_changes', '<session> <entries>').
-- Unfollowed streams send nothing, so writers pay nothing for NOTIFY's commit-time lock.
CREATE TABLE journal.followers (
    session text NOT NULL,
    backend integer NOT NULL,
    until   timestamptz NOT NULL,
    PRIMARY KEY (session, backend)
);

CREATE FUNCTION journal.notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND (NEW.size, NEW.generation, NEW.successor)
            IS NOT DISTINCT FROM (OLD.size, OLD.generation, OLD.successor) THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM journal.followers f
               WHERE f.session = NEW.session AND f.until > now()) THEN
        PERFORM pg_notify('journal_changes', NEW.session || ' ' || NEW.entries);
    END IF;
    RETURN NULL;
END
$$;
-- journal.append notifies for its own commits (it sets only size, entries and updated_at, so
-- this trigger does not fire for them); this covers creation, replacement and sealing
CREATE TRIGGER streams_changed AFTER INSERT OR UPDATE OF generation, successor ON journal.streams
    FOR EACH ROW EXECUTE FUNCTION journal.notify_change();
"""

# The entry types whose offsets journal.append records on the stream row for a resume.
RESUME_TYPES = frozenset({"compaction", "model_change", "thinking_level_change"})


def _announced_if_followed(session: str, entries: str) -> str:
    """The expression that announces a session's new number of entries if anyone follows it
    (not NULL then), as journal.append does: `session` and `entries` are SQL expressions."""
    return (f"CASE WHEN EXISTS (SELECT 1 FROM journal.followers f WHERE f.session = {session} "
            f"AND f.until > now()) THEN pg_notify('journal_changes', {session} || ' ' || "
            f"{entries}) END")


# The one-entry commit of the writer that holds the session's lease, sent on the lease's own
# connection (`journal.pg.storage`): one entry, not of RESUME_TYPES, at the position and byte
# offset the writer knows to be the session's end. It reads no other row and locks none: the
# connection holds the session's advisory lock, so while it lives no other writer can take
# the session over, and a takeover before finds this connection's commits ended (the lock
# is let go only when the backend ends); nothing else changes a live session's generation,
# epoch or seal without that lock (a replacement without the lease takes it for its
# transaction; a rotation and `journal push` hold the lease), and what the holder's own
# process changes under the lease the writer learns from the lease (`Lease.turns`). A
# unique violation of the primary key: a line is already at that offset (written without
# the lease, or a rotation's seal); the writer then goes through journal.append, which
# says what happened or appends at the true end. The statement takes the session's append
# gate shared (`lease.gate_key`; an advisory lock, which no table is read for): a writer
# without the lease that lost the race for the end to these commits takes it exclusive
# around its next call, which they then wait for.
# APPEND_ONE announces the commit when the writer says someone follows the session ($10);
# APPEND_LOOKING, which the writer sends instead at most every `watch.ANNOUNCE_LAG` seconds,
# looks in journal.followers (as journal.append does) and announces if anyone follows: its
# second column is not NULL then. A notification is only a hint (the followers re-read).
# Parameters (of APPEND_ONE_TYPES; sent through `journal.pg.prepared`): stream id,
# generation, position, byte offset, the line, its id, parentId and type, the session id,
# the gate's key, and for APPEND_ONE whether to announce.

_APPEND_ONE_INSERT = """
INSERT INTO journal.entries (stream, generation, position, byte_offset, line, id, parent_id,
                             type)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8 FROM (SELECT pg_advisory_xact_lock_shared($10)) gate
"""
APPEND_ONE = _APPEND_ONE_INSERT + """    RETURNING byte_offset,
        CASE WHEN $11 THEN pg_notify('journal_changes', $9 || ' ' || ($3 + 1)) END
"""
APPEND_LOOKING = (_APPEND_ONE_INSERT
                  + f"    RETURNING byte_offset, {_announced_if_followed('$9', '($3 + 1)')}\n")
# A look for followers on its own, made by a writer after a one-entry commit sent
# unannounced that ended only once its next look was due (`PostgresAppender._look_after`):
# announces the session's `entries` if anyone follows it (the row is then not NULL).
ANNOUNCE_IF_FOLLOWED = "SELECT " + _announced_if_followed("%(session)s::text",
                                                          "%(entries)s::bigint")
# the parameters' types (oids): bigint x4, text x5, bigint, and APPEND_ONE's boolean
APPEND_LOOKING_TYPES = (20, 20, 20, 20, 25, 25, 25, 25, 25, 20)
APPEND_ONE_TYPES = (*APPEND_LOOKING_TYPES, 16)

# Where a live session's current generation ends, from its last line (one backward probe of
# the primary key): its size in bytes, its number of entries, the id of its last line. A
# one-entry commit (APPEND_ONE) leaves streams.size and streams.entries as they were, so
# readers find a live session's end here, and a sealed one's (no row here) by the columns,
# which are exact for it: its seal went through journal.append, which sets them (so a sealed
# session whose rows fall short of its size is read short, and found so). journal.append
# (version 5) finds the end with the same query. Readers use it as STREAMS_WITH_END, the
# streams row `s` with its end `e`, read as `coalesce(e.size, s.size)` and
# `coalesce(e.entries, s.entries)`.
STREAM_END = """
SELECT x.byte_offset + octet_length(x.line) + 1 AS size, x.position + 1 AS entries,
       x.id AS last_id
    FROM journal.entries x
    WHERE x.stream = s.id AND x.generation = s.generation AND s.successor IS NULL
    ORDER BY x.byte_offset DESC LIMIT 1
"""
STREAMS_WITH_END = f"journal.streams s LEFT JOIN LATERAL ({STREAM_END}) AS e ON true"

# An archive moved out of the database (journal.pg.rotation.move_out): its lines are in the
# .jsonl.gz `exported_to` names, and its rows are gone; the SHA-256 of its bytes lets a
# reader (and push) know that file for its own. (Version 2's comment on exported_to says
# "rows dropped": they are only when moved_out_at is set.)
_V3 = """
ALTER TABLE journal.streams
    ADD COLUMN moved_out_at timestamptz,  -- lines moved out to exported_to, rows deleted
    ADD COLUMN moved_out_sha256 text;     -- hex SHA-256 of those lines (the bytes, not the gz)
"""

# A sealed session takes no more lines: journal.append as version 1 made it (never edited
# since), refusing any batch once the stream names a successor, whoever holds the lease (the
# seal's own epoch move fences the writers of before; this refuses one that takes the lease
# of a sealed session afterwards, or writes unfenced). A rotation appends its seal before it
# names the successor, in the same transaction.
_V4 = """
CREATE OR REPLACE FUNCTION journal.append(
    p_session text, p_epoch bigint, p_lines text[], p_ids text[], p_parents text[],
    p_types text[], p_offsets bigint[], p_total bigint, p_kept text
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint := coalesce(cardinality(p_lines), 0);
    sid bigint;
    gen bigint;
    cur_epoch bigint;
    old_size bigint;
    old_entries bigint;
    sealed_by text;
    found_id text;
    start_offset bigint;
    kept_offset bigint;
    compaction_at bigint;
    model_at bigint;
    thinking_at bigint;
BEGIN
    -- the row lock that serializes appends (and waits for a lease takeover's epoch change),
    -- taken by moving the size on at once; any refusal below rolls it back. Only the columns
    -- used are returned (scalars: no row-type assembly per call).
    UPDATE journal.streams SET size = size + p_total, entries = entries + n,
                               updated_at = now()
        WHERE session = p_session AND generation IS NOT NULL
        RETURNING id, generation, epoch, size - p_total, entries - n, successor
        INTO sid, gen, cur_epoch, old_size, old_entries, sealed_by;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no session % in this database', p_session
            USING ERRCODE = 'JN001';
    END IF;
    IF p_epoch IS NOT NULL AND cur_epoch <> p_epoch THEN
        RAISE EXCEPTION 'session %: the lease was taken over (epoch % is now %)',
            p_session, p_epoch, cur_epoch USING ERRCODE = 'JN002';
    END IF;
    IF sealed_by IS NOT NULL THEN
        RAISE EXCEPTION 'session %: sealed by a rotation; it continues in %',
            p_session, sealed_by USING ERRCODE = 'JN003', DETAIL = sealed_by;
    END IF;
    IF n = 0 THEN
        RETURN old_size;
    END IF;
    -- A retry after a lost acknowledgement: the batch is already the session's last (the
    -- writer holds the lease, so nothing came after it). One primary-key probe at the offset
    -- it would start at; the bytes compared only when its first id is there.
    start_offset := old_size - p_total;
    IF start_offset >= 0 AND p_ids[1] IS NOT NULL THEN
        SELECT e.id INTO found_id FROM journal.entries e
            WHERE e.stream = sid AND e.generation = gen AND e.byte_offset = start_offset;
        IF found_id = p_ids[1] AND ARRAY(
            SELECT e.line FROM journal.entries e
            WHERE e.stream = sid AND e.generation = gen AND e.byte_offset >= start_offset
            ORDER BY e.byte_offset) = p_lines
        THEN
            UPDATE journal.streams SET size = old_size, entries = old_entries WHERE id = sid;
            RETURN start_offset;  -- acknowledged at the offset it has, stored once
        END IF;
    END IF;
    IF n = 1 THEN
        -- one entry per commit is the common case: a plain VALUES row, no unnest
        INSERT INTO journal.entries (stream, generation, position, byte_offset, id, parent_id,
                                     type, line)
            VALUES (sid, gen, old_entries, old_size, p_ids[1], p_parents[1], p_types[1],
                    p_lines[1]);
    ELSE
        INSERT INTO journal.entries (stream, generation, position, byte_offset, id, parent_id,
                                     type, line)
            SELECT sid, gen, old_entries + u.o - 1, old_size + u.rel, u.i, u.p, u.t, u.l
            FROM unnest(p_lines, p_ids, p_parents, p_types, p_offsets)
                 WITH ORDINALITY AS u (l, i, p, t, rel, o);
    END IF;
    -- a followed session's followers are told (on commit) here rather than by the
    -- streams_changed trigger of version 2, which appends do not fire: a row trigger on every
    -- commit cost more than this one probe (journal.followers is made by version 2; the
    -- migrations are applied together)
    IF EXISTS (SELECT 1 FROM journal.followers f
               WHERE f.session = p_session AND f.until > now()) THEN
        PERFORM pg_notify('journal_changes', p_session || ' ' || (old_entries + n));
    END IF;
    IF p_types && ARRAY['compaction', 'model_change', 'thinking_level_change'] THEN
        -- where a resume starts reading: the latest compaction, where its kept entries
        -- start, the latest settings
        SELECT max(old_size + x.rel) FILTER (WHERE x.t = 'compaction'),
               max(old_size + x.rel) FILTER (WHERE x.t = 'model_change'),
               max(old_size + x.rel) FILTER (WHERE x.t = 'thinking_level_change')
            INTO compaction_at, model_at, thinking_at
            FROM unnest(p_types, p_offsets) AS x (t, rel);
        IF compaction_at IS NOT NULL AND p_kept IS NOT NULL THEN
            -- the kept entry is recent: look in the last 8 MiB first (a primary-key range)
            SELECT e.byte_offset INTO kept_offset FROM journal.entries e
                WHERE e.stream = sid AND e.generation = gen
                  AND e.byte_offset >= old_size + p_total - 8388608 AND e.id = p_kept
                ORDER BY e.byte_offset DESC LIMIT 1;
            IF kept_offset IS NULL THEN
                SELECT e.byte_offset INTO kept_offset FROM journal.entries e
                    WHERE e.stream = sid AND e.generation = gen AND e.id = p_kept
                    ORDER BY e.byte_offset DESC LIMIT 1;
            END IF;
        END IF;
        UPDATE journal.streams SET
            last_compaction = coalesce(compaction_at, last_compaction),
            last_kept = CASE WHEN compaction_at IS NULL THEN last_kept ELSE kept_offset END,
            last_model_change = coalesce(model_at, last_model_change),
            last_thinking_change = coalesce(thinking_at, last_thinking_change)
        WHERE id = sid;
    END IF;
    RETURN old_size;
END
$$;
"""

# The writer's one-entry commits (APPEND_ONE) no longer move streams.size and streams.entries
# on: journal.append finds the end from the session's last line, as readers do (STREAM_END),
# under a row lock that no longer rewrites the row first. It still sets size, entries and
# updated_at after its own batch, so a sealed session's columns are exact (its seal is
# appended here). Otherwise journal.append as version 4 made it (never edited since).
_V5 = """
CREATE OR REPLACE FUNCTION journal.append(
    p_session text, p_epoch bigint, p_lines text[], p_ids text[], p_parents text[],
    p_types text[], p_offsets bigint[], p_total bigint, p_kept text
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint := coalesce(cardinality(p_lines), 0);
    sid bigint;
    gen bigint;
    cur_epoch bigint;
    old_size bigint;
    old_entries bigint;
    sealed_by text;
    last_size bigint;
    last_entries bigint;
    found_id text;
    start_offset bigint;
    kept_offset bigint;
    compaction_at bigint;
    model_at bigint;
    thinking_at bigint;
BEGIN
    -- the row lock that serializes batches (and waits for a lease takeover's epoch change)
    SELECT s.id, s.generation, s.epoch, s.successor, s.size, s.entries
        INTO sid, gen, cur_epoch, sealed_by, old_size, old_entries
        FROM journal.streams s WHERE s.session = p_session AND s.generation IS NOT NULL
        FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no session % in this database', p_session
            USING ERRCODE = 'JN001';
    END IF;
    IF p_epoch IS NOT NULL AND cur_epoch <> p_epoch THEN
        RAISE EXCEPTION 'session %: the lease was taken over (epoch % is now %)',
            p_session, p_epoch, cur_epoch USING ERRCODE = 'JN002';
    END IF;
    IF sealed_by IS NOT NULL THEN
        RAISE EXCEPTION 'session %: sealed by a rotation; it continues in %',
            p_session, sealed_by USING ERRCODE = 'JN003', DETAIL = sealed_by;
    END IF;
    -- the end: after the last line (one backward probe of the primary key)
    SELECT x.byte_offset + octet_length(x.line) + 1, x.position + 1
        INTO last_size, last_entries
        FROM journal.entries x WHERE x.stream = sid AND x.generation = gen
        ORDER BY x.byte_offset DESC LIMIT 1;
    IF FOUND THEN
        old_size := last_size;
        old_entries := last_entries;
    END IF;
    IF n = 0 THEN
        RETURN old_size;
    END IF;
    -- Twice at most: a one-entry commit does not wait for this row lock, so one of this
    -- writer's that is still running (its connection lost, this batch sent again) may put a
    -- line at the offset read above; its unique-key check waits for it, and the end is read
    -- once more.
    FOR attempt IN 1..2 LOOP
        IF attempt = 2 THEN
            SELECT x.byte_offset + octet_length(x.line) + 1, x.position + 1
                INTO old_size, old_entries
                FROM journal.entries x WHERE x.stream = sid AND x.generation = gen
                ORDER BY x.byte_offset DESC LIMIT 1;
        END IF;
        -- A retry after a lost acknowledgement: the batch is already the session's last (the
        -- writer holds the lease, so nothing came after it). One primary-key probe at the
        -- offset it would start at; the bytes compared only when its first id is there.
        start_offset := old_size - p_total;
        IF start_offset >= 0 AND p_ids[1] IS NOT NULL THEN
            SELECT e.id INTO found_id FROM journal.entries e
                WHERE e.stream = sid AND e.generation = gen AND e.byte_offset = start_offset;
            IF found_id = p_ids[1] AND ARRAY(
                SELECT e.line FROM journal.entries e
                WHERE e.stream = sid AND e.generation = gen AND e.byte_offset >= start_offset
                ORDER BY e.byte_offset) = p_lines
            THEN
                RETURN start_offset;  -- acknowledged at the offset it has, stored once
            END IF;
        END IF;
        BEGIN
            IF n = 1 THEN
                INSERT INTO journal.entries (stream, generation, position, byte_offset, id,
                                             parent_id, type, line)
                    VALUES (sid, gen, old_entries, old_size, p_ids[1], p_parents[1],
                            p_types[1], p_lines[1]);
            ELSE
                INSERT INTO journal.entries (stream, generation, position, byte_offset, id,
                                             parent_id, type, line)
                    SELECT sid, gen, old_entries + u.o - 1, old_size + u.rel, u.i, u.p, u.t,
                           u.l
                    FROM unnest(p_lines, p_ids, p_parents, p_types, p_offsets)
                         WITH ORDINALITY AS u (l, i, p, t, rel, o);
            END IF;
            EXIT;
        EXCEPTION WHEN unique_violation THEN
            IF attempt = 2 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
    IF EXISTS (SELECT 1 FROM journal.followers f
               WHERE f.session = p_session AND f.until > now()) THEN
        PERFORM pg_notify('journal_changes', p_session || ' ' || (old_entries + n));
    END IF;
    IF p_types && ARRAY['compaction', 'model_change', 'thinking_level_change'] THEN
        -- where a resume starts reading: the latest compaction, where its kept entries
        -- start, the latest settings
        SELECT max(old_size + x.rel) FILTER (WHERE x.t = 'compaction'),
               max(old_size + x.rel) FILTER (WHERE x.t = 'model_change'),
               max(old_size + x.rel) FILTER (WHERE x.t = 'thinking_level_change')
            INTO compaction_at, model_at, thinking_at
            FROM unnest(p_types, p_offsets) AS x (t, rel);
        IF compaction_at IS NOT NULL AND p_kept IS NOT NULL THEN
            -- the kept entry is recent: look in the last 8 MiB first (a primary-key range)
            SELECT e.byte_offset INTO kept_offset FROM journal.entries e
                WHERE e.stream = sid AND e.generation = gen
                  AND e.byte_offset >= old_size + p_total - 8388608 AND e.id = p_kept
                ORDER BY e.byte_offset DESC LIMIT 1;
            IF kept_offset IS NULL THEN
                SELECT e.byte_offset INTO kept_offset FROM journal.entries e
                    WHERE e.stream = sid AND e.generation = gen AND e.id = p_kept
                    ORDER BY e.byte_offset DESC LIMIT 1;
            END IF;
        END IF;
    END IF;
    UPDATE journal.streams SET
        size = old_size + p_total, entries = old_entries + n, updated_at = now(),
        last_compaction = coalesce(compaction_at, last_compaction),
        last_kept = CASE WHEN compaction_at IS NULL THEN last_kept ELSE kept_offset END,
        last_model_change = coalesce(model_at, last_model_change),
        last_thinking_change = coalesce(thinking_at, last_thinking_change)
    WHERE id = sid;
    RETURN old_size;
END
$$;
"""

# Version 6 changes no table: the lease holder's one-entry commits of this release read no
# stream row (APPEND_ONE), which is safe only while every replacement takes the lease's lock
# and every writer without the lease takes the append gate, as this release's do. The new
# version makes an older release refuse the database (newer than it knows) rather than
# replace a session under such a writer.
_V6 = """
COMMENT ON TABLE journal.entries IS 'one row per line; the lease holder''s one-entry commits
are fenced by the lease''s advisory lock, not by a probe of journal.streams (version 6)';
"""

# Version 7: what a push found alike, so that the next push of a grown or unchanged file
# reads only the rows after it (`journal.pg.transfer`). A generation's lines are only ever
# appended to (a replacement makes a new generation, a move out a new state), so the SHA-256
# of the first `alike_size` bytes of generation `alike_generation` stays true for as long as
# that generation is the session's.
_V7 = """
ALTER TABLE journal.streams ADD COLUMN alike_generation bigint,
    ADD COLUMN alike_size bigint, ADD COLUMN alike_sha256 text;
"""

MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "streams, entries, append()", _V1),
    (2, "successors, file names, quarantine, followers and change notifications", _V2),
    (3, "archives moved out of the database", _V3),
    (4, "a sealed session takes no more lines", _V4),
    (5, "one-entry commits leave the stream row as it is", _V5),
    (6, "one-entry commits fenced by the lease's lock alone", _V6),
    (7, "what a push found alike, for the next push", _V7),
]
VERSION = MIGRATIONS[-1][0]


class SchemaError(JournalError):
    """The database cannot hold sessions: wrong encoding, a newer schema, no permission."""


GRANTS_DOC = 'docs/postgres.md, "Roles and grants"'
"""Where a refused role is sent: the grants each role needs."""


def current_role(conn: psycopg.Connection[Any]) -> str:
    """The role `conn`'s statements run as (`current_user`: the URL's user, or another one
    its options or the role's settings set), quoted for a message; the user it logged in as
    where that cannot be read."""
    import psycopg

    try:
        row = conn.execute("SELECT current_user").fetchone()
    except psycopg.Error:
        row = None
    return repr(str(row[0]) if row is not None else conn.info.user)


def current_version(conn: psycopg.Connection[Any]) -> int:
    """The schema version the database is at (0: no journal schema yet)."""
    # pg_class read as a table (not through to_regclass and the catalog cache, which an
    # advisory lock does not refresh), so a migration just committed elsewhere is seen
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN "
                       "pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE "
                       "n.nspname = 'journal' AND c.relname = 'schema_version')").fetchone()
    if row is None or not row[0]:
        return 0
    found = conn.execute("SELECT coalesce(max(version), 0) FROM journal.schema_version")
    value = found.fetchone()
    return int(str(value[0])) if value is not None else 0


def ensure(conn: psycopg.Connection[Any]) -> int:
    """Bring the database up to `VERSION` (each migration in its own transaction); return the
    version. SchemaError if the server's encoding is not UTF8 (a line's bytes must come back
    as they went in) or the database is at a newer version than this program knows. Making
    the schema in a database that had none is said (a warning): a writer pointed at a
    misspelt database name that exists would otherwise store its sessions there unnoticed."""
    import psycopg

    row = conn.execute("SHOW server_encoding").fetchone()
    # text comes back as bytes from a database that is not in a known encoding (SQL_ASCII)
    found = row[0] if row is not None else None
    encoding = found.decode(errors="replace") if isinstance(found, bytes) else str(found)
    if encoding.upper() not in ("UTF8", "UTF-8"):
        raise SchemaError(f"the database's encoding is {encoding}; journal needs UTF8 "
                          "(CREATE DATABASE ... ENCODING 'UTF8')")
    version = current_version(conn)
    if version >= VERSION:
        if version > VERSION:
            raise SchemaError(f"the database's journal schema is at version {version}, newer "
                              f"than this program's {VERSION}; upgrade journal")
        return version
    created = False
    for number, description, sql in MIGRATIONS:
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                if current_version(conn) >= number:
                    continue  # another process migrated meanwhile
                conn.execute(sql)
                conn.execute("INSERT INTO journal.schema_version (version, description) "
                             "VALUES (%s, %s)", (number, description))
                created = created or number == 1
        except psycopg.errors.InsufficientPrivilege as e:
            raise SchemaError(f"cannot create the journal schema (version {number}) as the "
                              f"role {current_role(conn)}: {e}; run the migrations once as "
                              f"the schema's owner ({GRANTS_DOC})") from e
    if created:
        log.warning("created the journal schema in database %r, which had none: the first "
                    "session stored there (is it the database meant?)", conn.info.dbname)
    return current_version(conn)
