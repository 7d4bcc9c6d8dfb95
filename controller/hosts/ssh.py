"""One SSH connection to a remote host (paramiko), as OpenSSH's client would make it.

`user@host:port` or an alias from the SSH config ($NETSPEC_SSH_CONFIG, then
~/.ssh/config: HostName, User, Port, IdentityFile, UserKnownHostsFile). Keys come from the
config, the agent and ~/.ssh. Host keys are checked against known_hosts; an unknown key is
refused unless accept-new is asked for (then it is added to the file), and a changed key is
always refused. `Tunnel` forwards a local TCP port to an address on the remote side through
the connection (what `ssh -L` does), so a daemon there can listen on its own 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import logging
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paramiko
from netspec.protocol.errors import ConnectionLost

from ..experiment.sshtargets import SSHTarget

SSH_CONNECT_S = 10.0
CLOSE_S = 5.0  # what closing a tunnel waits for its threads to end

log = logging.getLogger("netspec")

# paramiko logs every failed handshake with a traceback from its transport thread; the
# failure reaches the user once, as the ConnectionLost that names the host.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """OpenSSH's StrictHostKeyChecking=accept-new: trust a first-seen key and record it."""

    def __init__(self, path: str):
        self.path = path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class SSHConnection:
    """A logged-in SSH connection. Lifecycle: `open()` once (or enter its `with`, which
    opens it unless it is open), then commands, files and tunnels; `close()` (or leaving
    the `with`) ends them all and may be called twice."""

    def __init__(self, host: str, target: SSHTarget, accept_new: bool = False):
        self.host, self.target, self.accept_new = host, target, accept_new
        self.client: paramiko.SSHClient | None = None

    def __enter__(self) -> SSHConnection:
        if self.client is None:
            self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, timeout: float = SSH_CONNECT_S) -> None:
        """Connect and authenticate; nothing if it is open already (a connection whose
        transport ended is closed and opened again).

        Raises:
            ConnectionLost: naming the host and why (unreachable, refused, host key
                unknown or changed, authentication failed).
        """
        if self.client is not None:
            transport = self.client.get_transport()
            if transport is not None and transport.is_active():
                return
            self.close()
        t = self.target
        client = paramiko.SSHClient()
        for path in t.known_hosts:
            with contextlib.suppress(FileNotFoundError):
                client.load_host_keys(path)
        client.set_missing_host_key_policy(
            _AcceptNew(t.known_hosts[0]) if self.accept_new else paramiko.RejectPolicy())
        try:
            client.connect(t.hostname, t.port, username=t.user, key_filename=list(t.identity_files) or None,
                           timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                           allow_agent=True, look_for_keys=True)
        except paramiko.BadHostKeyException as exc:
            raise self._lost(f"the host key of {t.hostname} has CHANGED (not the one in "
                             f"{', '.join(t.known_hosts)}); refusing to connect") from exc
        except paramiko.AuthenticationException as exc:
            tried = ", ".join(t.identity_files) or "~/.ssh keys"
            raise self._lost(f"authentication failed for {t.label} (keys tried: {tried}, and the "
                             "agent's)") from exc
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise self._lost(f"host key of {t.hostname} is unknown (not in "
                                 f"{', '.join(t.known_hosts)}); add it, or set accept_new_host_key: "
                                 "true for the host, or run with --accept-new-host-keys") from exc
            raise self._lost(f"ssh to {t.label}: {exc}") from exc
        except paramiko.ssh_exception.NoValidConnectionsError as exc:
            reasons = sorted({e.strerror or str(e) for e in exc.errors.values()})
            raise self._lost(f"ssh to {t.label}: {'; '.join(reasons)}") from exc
        except (OSError, EOFError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or "closed"
            raise self._lost(f"ssh to {t.label}: {reason}") from exc
        self.client = client

    def _lost(self, detail: str) -> ConnectionLost:
        return ConnectionLost(self.host, detail=detail)

    @property
    def transport(self) -> paramiko.Transport:
        assert self.client is not None, "open() first"
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise self._lost("the ssh connection is closed")
        return transport

    def run(self, argv: list[str], stdin: bytes = b"", timeout: float = 60.0) -> tuple[int, str, str]:
        """Run a command on the remote host and wait for it: (exit status, stdout, stderr)."""
        chan = self.transport.open_session(timeout=timeout)
        chan.settimeout(timeout)
        try:
            chan.exec_command(shlex.join(argv))
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = chan.makefile("rb").read(), chan.makefile_stderr("rb").read()
            return chan.recv_exit_status(), out.decode(errors="replace"), err.decode(errors="replace")
        except TimeoutError as exc:
            raise self._lost(f"{argv[0]} did not finish within {timeout:g} s") from exc
        finally:
            chan.close()

    def start(self, argv: list[str]) -> paramiko.Channel:
        """Start a command that lives as long as its channel; its stdin is the lifeline."""
        chan = self.transport.open_session()
        chan.exec_command(shlex.join(argv))
        return chan

    def sftp(self) -> paramiko.SFTPClient:
        """An SFTP session on this connection; close it (`with`) when done."""
        try:
            return paramiko.SFTPClient.from_transport(self.transport)  # type: ignore[return-value]
        except (paramiko.SSHException, OSError) as exc:
            raise self._lost(f"no SFTP session: {exc}") from exc

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        with self.sftp() as sftp:
            with sftp.open(remote_path, "wb") as f:
                f.write(data)
            sftp.chmod(remote_path, mode)

    def put_files(self, local: list[Path], remote_dir: str) -> None:
        with self.sftp() as sftp:
            for path in local:
                sftp.put(str(path), f"{remote_dir}/{path.name}")

    def close(self) -> None:
        """Close the connection and wait (CLOSE_S at most) for its transport's thread to end,
        which paramiko does not."""
        if self.client is not None:
            transport = self.client.get_transport()
            self.client.close()
            self.client = None
            if transport is not None and transport is not threading.current_thread():
                transport.join(CLOSE_S)


class Tunnel:
    """A local TCP port whose connections are forwarded to `remote` (host, port) as seen
    from the remote host.

    Lifecycle: `open()` returns the local port and starts the thread that accepts; each
    connection accepted gets a thread that pumps its bytes. The tunnel owns them all:
    `close()` (or leaving its `with`) wakes each one, joins them under CLOSE_S, and closes
    the listening socket; it may be called twice.
    """

    def __init__(self, conn: SSHConnection, remote: tuple[str, int]):
        self.conn, self.remote = conn, remote
        self.listener = socket.create_server(("127.0.0.1", 0))
        # Readable once closing: every thread of the tunnel waits on it beside its sockets,
        # and nobody reads it, so it wakes them all.
        self._wake, self._waker = socket.socketpair()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.closed = False

    def __enter__(self) -> Tunnel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> int:
        self._run(self._accept, f"tunnel-{self.conn.host}")
        return self.listener.getsockname()[1]

    def _run(self, target: Callable[..., None], name: str, *args: Any) -> bool:
        """Start a thread the tunnel owns; False if it is closed (none started)."""
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            if self.closed:
                return False
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            thread.start()
        return True

    def _accept(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self.listener, self._wake], [], [])
                if self._wake in ready:
                    return
                local, _ = self.listener.accept()
            except OSError:
                return
            try:
                chan = self.conn.transport.open_channel("direct-tcpip", self.remote, ("127.0.0.1", 0),
                                                        timeout=SSH_CONNECT_S)
            except (paramiko.SSHException, ConnectionLost, OSError):
                local.close()
                continue
            local.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self._run(_pump, f"tunnel-{self.conn.host}-pump", local, chan, self._wake):
                chan.close()  # closed as it was accepted: no thread took it
                local.close()
                return

    def close(self) -> list[str]:
        """End every thread of the tunnel and wait for them, CLOSE_S at most in all; the
        names of those still running then (a pump stuck in a write the remote side does
        not take, which closing the SSH connection ends)."""
        with self._lock:
            if self.closed:
                return []
            self.closed = True
            threads = self._threads
        with contextlib.suppress(OSError):
            self._waker.send(b"x")
        deadline = time.monotonic() + CLOSE_S
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            log.warning("ssh tunnel to %s: %d thread(s) still running %g s after it closed",
                        self.conn.host, len(stuck), CLOSE_S)
        for sock in (self.listener, self._waker, *(() if stuck else (self._wake,))):
            with contextlib.suppress(OSError):
                sock.close()
        return stuck


def _pump(local: socket.socket, chan: paramiko.Channel, wake: socket.socket) -> None:
    """Copy bytes both ways until either side ends or `wake` is readable, then close both."""
    try:
        while True:
            ready, _, _ = select.select([local, chan, wake], [], [])
            if wake in ready:
                break
            if local in ready:
                data = local.recv(65536)
                if not data:
                    break
                chan.sendall(data)
            if chan in ready:
                data = chan.recv(65536)
                if not data:
                    break
                local.sendall(data)
    except OSError:
        pass
    finally:
        chan.close()
        local.close()
