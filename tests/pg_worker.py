"""A writer process for the PostgreSQL multi-writer tests (tests/test_pg_writers.py).

    python tests/pg_worker.py MODE URL NAME [N]

Every event goes to stdout as one line written with one `os.write` (the test reads a pipe or
a file), so a SIGKILL never leaves half an event behind:

- `contend`: N turns; each opens the session (waiting for the lease), appends four entries in
  four commits tagged `NAME turn k`, and closes it. Prints `turn <t>` after each.
- `hold`: opens the session, appends one entry, prints `held`, then waits for a line
  on stdin and tries one more append: prints `appended <id>` or `refused <error class>`.
- `batches`: opens the session and appends batches of five entries (one commit each) for
  ever, printing `ack <batch> <id> <id> ...` once each commit returned.
- `stream`: opens the session, appends one entry a commit (the lease holder's one-entry
  statement) until a line arrives on stdin (checked between commits), then prints
  `appended <n>` and closes the session. Prints `started` after its first commit.
"""

from __future__ import annotations

import os
import sys

from journal import Session
from journal.errors import JournalError


def say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def message(text: str) -> dict[str, object]:
    return {"role": "user", "content": text, "timestamp": 1}


def contend(url: str, name: str, turns: int) -> None:
    for turn in range(turns):
        with Session.open(url, lock_timeout=60) as session:
            for k in range(4):
                session.append_message(message(f"{name} {turn} {k}"))
        say(f"turn {turn}")


def hold(url: str, name: str) -> None:
    session = Session.open(url, lock_timeout=30)
    session.append_message(message(f"{name} first"))
    say("held")
    sys.stdin.readline()
    try:
        entry = session.append_message(message(f"{name} after the takeover"))
    except JournalError as e:
        say(f"refused {type(e).__name__}")
    else:
        say(f"appended {entry}")


def batches(url: str, name: str) -> None:
    session = Session.open(url, lock_timeout=30)
    batch = 0
    while True:
        ids = session.append_many([{"type": "message", "message": message(f"{name} {batch} {k}")}
                                   for k in range(5)])
        say("ack " + str(batch) + " " + " ".join(ids))
        batch += 1


def stream(url: str, name: str) -> None:
    import selectors

    waiting = selectors.DefaultSelector()
    waiting.register(sys.stdin, selectors.EVENT_READ)
    with Session.open(url, lock_timeout=30) as session:
        n = 0
        while True:
            session.append_message(message(f"{name} {n}"))
            n += 1
            if n == 1:
                say("started")
            if waiting.select(timeout=0):
                break
    say(f"appended {n}")


if __name__ == "__main__":
    mode, url, name = sys.argv[1:4]
    if mode == "contend":
        contend(url, name, int(sys.argv[4]))
    elif mode == "hold":
        hold(url, name)
    elif mode == "batches":
        batches(url, name)
    elif mode == "stream":
        stream(url, name)
    else:
        raise SystemExit(f"unknown mode {mode}")
