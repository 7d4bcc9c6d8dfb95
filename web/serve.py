"""`ns_control serve`: the browser's app on a socket this process binds itself (so port 0
picks a free port and the URL printed is the one that answers), served by uvicorn until
interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import webbrowser
from collections.abc import Callable
from pathlib import Path

import uvicorn
from netspec.protocol.errors import NetspecError

from .access import Access, guard
from .app import create_app


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (IPv4 or IPv6 by the address).

    Raises:
        NetspecError: the address cannot be bound (in use, not this machine's), said with it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise NetspecError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    return sock


def serve(runs: Path, campaigns: Path, host: str, port: int, open_browser: bool,
          say: Callable[[str], None]) -> None:
    """Serve the runs and campaigns under the two roots until interrupted, to the user who
    started it and to whoever holds the URL it prints (its token: `access.py`)."""
    sock = bind(host, port)
    access = Access(host, sock.getsockname()[1])
    url = access.url()
    say(f"netspec results browser: {url}  (runs {runs.resolve()}, campaigns {campaigns.resolve()}; "
        "Ctrl-C stops it)")
    if host not in ("127.0.0.1", "::1", "localhost"):
        say(f"note: listening on {host}, so other machines may reach it: who holds this URL reads "
            "these results")
    if open_browser and not webbrowser.open(url):
        say(f"note: no browser to open here (--open); open {url} in one")
    say("note: it serves you (and root) on this machine as you are; anyone else only with this URL, "
        "its token")
    app = guard(create_app(runs, campaigns), access)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    with contextlib.closing(sock):
        asyncio.run(server.serve(sockets=[sock]))
