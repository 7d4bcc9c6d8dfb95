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
from pathlib import Path

import paramiko
from netspec.protocol.errors import ConnectionLost

from ..experiment.sshtargets import SSHTarget

SSH_CONNECT_S = 10.0

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
    """A logged-in SSH connection. Lifecycle: `open()` once, then commands, files and
    tunnels; `close()` ends them all and may be called twice."""

    def __init__(self, host: str, target: SSHTarget, accept_new: bool = False):
        self.host, self.target, self.accept_new = host, target, accept_new
        self.client: paramiko.SSHClient | None = None

    def open(self, timeout: float = SSH_CONNECT_S) -> None:
        """Connect and authenticate.

        Raises:
            ConnectionLost: naming the host and why (unreachable, refused, host key
                unknown or changed, authentication failed).
        """
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
        if self.client is not None:
            self.client.close()
            self.client = None


class Tunnel:
    """A local TCP port whose connections are forwarded to `remote` (host, port) as seen
    from the remote host. Lifecycle: `open()` returns the local port; `close()` stops it."""

    def __init__(self, conn: SSHConnection, remote: tuple[str, int]):
        self.conn, self.remote = conn, remote
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.closed = False

    def open(self) -> int:
        threading.Thread(target=self._accept, name=f"tunnel-{self.conn.host}", daemon=True).start()
        return self.listener.getsockname()[1]

    def _accept(self) -> None:
        while not self.closed:
            try:
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
            threading.Thread(target=_pump, args=(local, chan), daemon=True).start()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.listener.close()


def _pump(local: socket.socket, chan: paramiko.Channel) -> None:
    """Copy bytes both ways until either side ends, then close both."""
    try:
        while True:
            ready, _, _ = select.select([local, chan], [], [])
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
