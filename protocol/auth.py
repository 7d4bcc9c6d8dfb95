"""Mutual HMAC-SHA256 challenge-response over a shared key, before any command; then
every frame of the connection is tagged with a key of this connection alone.

The daemon proves nothing until the client has proved it knows the key, and then proves
itself in turn, so neither side talks to an impostor. Nonces from both sides stop replay
of a handshake; the per-connection key and the frames' counted sequence (wire.Seal) stop
injection and replay after it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from .channel import Channel
from .errors import AuthError, ConfigError, HandshakeDropped
from .messages import PROTOCOL_VERSION
from .wire import Seal

KEY_BYTES = 32
NONCE_BYTES = 32
HANDSHAKE_FRAME_LIMIT = 4096


def netspec_home() -> Path:
    """Where per-user state lives: $NETSPEC_HOME, else ~/.config/netspec."""
    return Path(os.environ.get("NETSPEC_HOME") or Path.home() / ".config" / "netspec")


def default_key_file() -> Path:
    return Path(os.environ.get("NETSPEC_KEY_FILE") or netspec_home() / "key")


def load_or_create_key(path: Path | None = None) -> bytes:
    """Return the shared key, creating it (mode 0600) on first use.

    Raises:
        ConfigError: the file is readable by others or is not a hex key.
    """
    path = Path(path or default_key_file())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        # Written whole aside, then linked in place: linking never replaces a key another
        # process (`up` reaching hosts in parallel) made first, and nobody reads half of one.
        partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(KEY_BYTES) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(partial, path)
        finally:
            partial.unlink()
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    if path.stat().st_mode & 0o077:
        raise ConfigError("key file is accessible by group or others; chmod 600 it", str(path))
    try:
        key = bytes.fromhex(path.read_text().strip())
    except ValueError as exc:
        raise ConfigError("key file does not hold a hex key", str(path)) from exc
    if len(key) < 16:
        raise ConfigError("key is shorter than 16 bytes", str(path))
    return key


def new_run_key() -> bytes:
    """A key for one host of one run (a container netspec makes or attaches to): drawn
    fresh, never the long-term key, so what the host holds is useless once the run is over."""
    return secrets.token_bytes(KEY_BYTES)


def read_run_key(fd: int) -> bytes:
    """Read a key for one run, a line of hex, from the descriptor `fd` (a daemon's stdin, the
    SSH channel): a byte at a time, so nothing after the line is taken from whoever reads on.

    Raises:
        ConfigError: the stream ended first, or the line holds no hex key of 16 bytes or more.
    """
    line = b""
    while not line.endswith(b"\n") and len(line) <= 2 * KEY_BYTES + 2:
        byte = os.read(fd, 1)
        if not byte:
            raise ConfigError("stdin ended before the key for the run", "stdin")
        line += byte
    try:
        key = bytes.fromhex(line.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError("the key for the run on stdin is not hex", "stdin") from exc
    if len(key) < 16:
        raise ConfigError("the key for the run on stdin is shorter than 16 bytes", "stdin")
    return key


def take_run_key(path: Path) -> bytes:
    """Read a key for one run from `path` and remove the file, so that nothing started after
    (the programs of the run) finds it there.

    Raises:
        ConfigError: the file is missing, readable by others or holds no hex key.
    """
    try:
        return _read_key(path)
    except FileNotFoundError:
        raise ConfigError("no key file for the run", str(path)) from None
    finally:
        path.unlink(missing_ok=True)  # read or refused, it is not left for anyone else


def _mac(key: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(key, b"netspec-" + role + first + second, hashlib.sha256).digest()


def _seals(key: bytes, nonce_c: bytes, nonce_s: bytes) -> tuple[Seal, Seal]:
    """The controller-to-daemon and daemon-to-controller seals of one connection."""
    session_key = _mac(key, b"session", nonce_c, nonce_s)
    return Seal(session_key, b"controller->daemon"), Seal(session_key, b"daemon->controller")


async def server_handshake(channel: Channel, key: bytes) -> None:
    """Authenticate the client on `channel`; raises AuthError (after telling the peer).

    The channel decodes only the frame the handshake asks for (`Channel.hold`): whatever
    the client writes after its auth, in the same segment or not, is decoded under the
    seal, and a frame without it ends the connection."""
    channel.hold()
    limit, channel.decoder.max_frame = channel.decoder.max_frame, HANDSHAKE_FRAME_LIMIT
    nonce_s = os.urandom(NONCE_BYTES)
    channel.send({"t": "challenge", "nonce": nonce_s, "proto": PROTOCOL_VERSION})
    answer = await channel.recv()
    if answer is None:
        raise AuthError("closed during the handshake", channel.peer)
    nonce_c, mac = answer.get("nonce"), answer.get("mac")
    good = (answer["t"] == "auth" and isinstance(nonce_c, bytes) and isinstance(mac, bytes)
            and len(nonce_c) == NONCE_BYTES
            and hmac.compare_digest(mac, _mac(key, b"client", nonce_s, nonce_c)))
    if not good:
        channel.send({"t": "error", "error": {"type": "AuthError", "message": "authentication failed"}})
        await channel.drain()
        raise AuthError("authentication failed", channel.peer)
    channel.send({"t": "welcome", "mac": _mac(key, b"server", nonce_c, nonce_s)})
    # Sealed before anything may wait: the client's first sealed frame can follow at once.
    channel.decoder.max_frame = limit
    to_daemon, to_controller = _seals(key, nonce_c, nonce_s)
    channel.seal(outgoing=to_controller, incoming=to_daemon)
    await channel.drain()


async def client_handshake(channel: Channel, key: bytes) -> None:
    """Prove the key to the daemon and check that the daemon knows it too; raises AuthError
    (HandshakeDropped if the daemon hung up without refusing).

    As in `server_handshake`, what the daemon writes after its welcome is decoded only
    under the seal."""
    channel.hold()
    limit, channel.decoder.max_frame = channel.decoder.max_frame, HANDSHAKE_FRAME_LIMIT
    challenge = await channel.recv()
    if challenge is not None and challenge["t"] == "error":
        raise AuthError(f"the daemon refused the connection: {challenge.get('error', {}).get('message')}",
                        channel.peer)
    if challenge is None:
        raise HandshakeDropped("the daemon hung up before its challenge (one with too many connections "
                               "in their handshake drops the oldest: try again)", channel.peer)
    if challenge["t"] != "challenge":
        raise AuthError("expected a challenge from the daemon", channel.peer)
    if challenge.get("proto") != PROTOCOL_VERSION:
        raise AuthError(f"daemon speaks protocol {challenge.get('proto')}, "
                        f"this controller speaks {PROTOCOL_VERSION}", channel.peer)
    nonce_s = challenge.get("nonce")
    if not isinstance(nonce_s, bytes):
        raise AuthError("malformed challenge", channel.peer)
    nonce_c = os.urandom(NONCE_BYTES)
    channel.send({"t": "auth", "nonce": nonce_c, "mac": _mac(key, b"client", nonce_s, nonce_c)})
    await channel.drain()
    reply = await channel.recv()
    if reply is None:
        raise HandshakeDropped("the daemon hung up during the handshake (one with too many connections "
                               "in their handshake drops the oldest: try again)", channel.peer)
    if reply["t"] != "welcome":
        raise AuthError("the daemon refused our key (do both sides share the same key file?)",
                        channel.peer)
    mac = reply.get("mac")
    if not isinstance(mac, bytes) or not hmac.compare_digest(mac, _mac(key, b"server", nonce_c, nonce_s)):
        raise AuthError("the daemon failed to prove it knows the key", channel.peer)
    channel.decoder.max_frame = limit
    to_daemon, to_controller = _seals(key, nonce_c, nonce_s)
    channel.seal(outgoing=to_daemon, incoming=to_controller)
