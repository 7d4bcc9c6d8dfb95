"""Who may read what `ns_control serve` serves: every request passes here before the app.

- The Host header must name this server (its address, or localhost on loopback; on a wildcard
  address any IP literal or this machine's name): a page of another site whose name an
  attacker made resolve to 127.0.0.1 (DNS rebinding) names that site, and is refused.
- The user who started it (and root), connecting from this machine, is served as they are: the
  peer's socket is looked up in /proc/net/tcp{,6}, whose owner is its user. Anyone else, another
  user of this machine or another machine, needs the serve's token: the URL it printed holds it
  (`?token=`), and a page opened with it keeps it in a cookie for the requests that follow.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
ASGI = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


@dataclass(frozen=True)
class Access:
    """What the serve on `host` (the address it is bound to) lets in; `token` is made anew for
    each serve, `uids` the local users served without it (the serving user and root)."""

    host: str
    port: int
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    uids: frozenset[int] = field(default_factory=lambda: frozenset({os.geteuid(), 0}))

    @property
    def cookie(self) -> str:
        return f"netspec-serve-{self.port}"  # cookies are not kept apart by port: the name is

    def url(self) -> str:
        """The URL to print: the one that lets its holder in."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/?token={self.token}"

    def host_ok(self, header: str) -> bool:
        """Whether a Host header names this server."""
        name = header.rsplit(":", 1)[0] if not header.endswith("]") else header
        name = name.strip("[]").lower()
        if self.host in WILDCARDS:
            return _is_address(name) or name in LOOPBACK_NAMES or name in {
                socket.gethostname().lower(), socket.getfqdn().lower()}
        if _loopback(self.host):
            return name in LOOPBACK_NAMES or name == self.host.lower()
        return name == self.host.lower()

    def refusal(self, scope: Scope) -> str | None:
        """Why the request of `scope` is refused, or None when it is let in."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if not self.host_ok(headers.get("host", "")):
            return (f"Host {headers.get('host', '')!r} is not this server's name: a page of another site "
                    "reached it (DNS rebinding), and is refused")
        if self.token_given(scope, headers):
            return None
        client, server = scope.get("client"), scope.get("server")
        if client and server and _loopback(client[0]) and peer_uid(client, server) in self.uids:
            return None
        return ("this results browser serves the user who started it; anyone else opens the URL it "
                "printed (with its token)")

    def token_given(self, scope: Scope, headers: dict[str, str]) -> bool:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
        cookies: SimpleCookie = SimpleCookie()
        with contextlib.suppress(CookieError):  # a malformed cookie header holds no token
            cookies.load(headers.get("cookie", ""))
        kept = cookies[self.cookie].value if self.cookie in cookies else ""
        return any(given and hmac.compare_digest(given, self.token) for given in (query, kept))


def guard(app: ASGI, access: Access) -> ASGI:
    """`app` behind `access`: a refused request is a 403 saying why; a request that gave the
    token in its URL gets it back as a cookie (HttpOnly, SameSite=Strict) for the page's own."""

    async def guarded(scope: Scope, receive: Callable[[], Awaitable[Any]],
                      send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        refused = access.refusal(scope)
        if refused is not None:
            body = f"403 forbidden: {refused}\n".encode()
            await send({"type": "http.response.start", "status": 403,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return None
        if b"token=" not in scope.get("query_string", b""):
            return await app(scope, receive, send)

        async def with_cookie(message: Any) -> None:
            if message["type"] == "http.response.start":
                cookie = f"{access.cookie}={access.token}; Path=/; HttpOnly; SameSite=Strict"
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"set-cookie", cookie.encode())]}
            await send(message)
        return await app(scope, receive, with_cookie)

    return guarded


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address.lower() == "localhost"
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The user owning the socket at `client` connected to `server` on this machine (from
    /proc/net/tcp and tcp6, where the kernel lists each socket with its owner), or None."""
    want = (_unmapped(client[0]), client[1], _unmapped(server[0]), server[1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if (*_endpoint(fields[1]), *_endpoint(fields[2])) == want:
                        return int(fields[7])
        except OSError:
            continue
    return None


def _endpoint(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """An address:port as /proc/net/tcp writes it: hex, each 32-bit word in host byte order."""
    address, port = text.split(":")
    raw = bytes.fromhex(address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return _unmapped(str(ipaddress.ip_address(words))), int(port, 16)


def _unmapped(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    ip = ipaddress.ip_address(address)
    return getattr(ip, "ipv4_mapped", None) or ip
