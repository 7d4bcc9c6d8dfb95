"""A host reached over SSH: netspec installed there, netspecd started, the control channel
tunnelled through the SSH connection.

On the remote host everything lives under ~/.local/share/netspec: `venv/` (this build of
netspec, installed from wheels copied over, recorded in venv/netspec.build), `keys/`,
`work/<daemon>/` (the daemon's run directories) and `daemons/<daemon>.json` for a daemon
started detached by `ns_control up` or `--keep-daemons`. A daemon started for one run is
attached instead: its stdin is the SSH channel, and it stops (killing its run) when the
channel or the connection ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shlex
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

import paramiko
from netspec.protocol.auth import default_key_file, new_run_key
from netspec.protocol.errors import ConnectionLost, NetspecError
from netspec.protocol.hostfacts import HostFacts
from netspec.protocol.names import safe_name

from ..experiment.model import Host as HostSpec
from ..experiment.sshtargets import resolve
from .fleet import Host
from .runfiles import RunFiles, SFTPRunFiles
from .ssh import SSHConnection, Tunnel
from .wheels import build_id, local_wheels

# A daemon the user keeps on a host holds a key the user placed there: this controller's, the
# file netspecd reads by default (docs/explanations/security.md, rotating it).
KEY_HELP = ("no key for a daemon kept there: place this controller's key as netspecd's there, e.g. "
            "`ssh {target} 'mkdir -p -m 700 ~/.config/netspec && umask 077 && cat > ~/.config/netspec/key' "
            "< {key}` (docs/explanations/security.md)")
INSTALL_S = 300.0
DAEMON_START_S = 20.0
STOP_S = 15.0
STATE_POLL_S = 0.05  # how often the host's shell looks for a detached daemon's state file

# Runs on the remote host with its own python3, before netspec is there: one installer at a
# time per home directory (hosts may share one over NFS), the build marker written last.
# pip runs from the wheel Python bundles for ensurepip (Debian keeps it in WHEEL_PKG_DIR), so
# the venv needs no pip of its own (installing it there took longer than netspec's whole
# install); --no-deps: the wheels
# copied are exactly what the daemon needs (wheels.py).
INSTALL_SCRIPT = """
import fcntl, glob, os, subprocess, sys, sysconfig, venv
base, build, wheels = sys.argv[1:4]
env = os.path.join(base, "venv")
marker = os.path.join(env, "netspec.build")
with open(os.path.join(base, "install.lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if os.path.exists(marker) and open(marker).read() == build:
        sys.exit(0)
    places = [sysconfig.get_config_var("WHEEL_PKG_DIR") or "/usr/share/python-wheels"]
    try:
        import ensurepip
        places.append(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled"))
    except ImportError:
        pass
    bundled = [w for place in places for w in glob.glob(os.path.join(place, "pip-*.whl"))]
    venv.create(env, with_pip=not bundled, clear=True)
    pip = [os.path.join(bundled[0], "pip")] if bundled else ["-m", "pip"]
    done = subprocess.run([os.path.join(env, "bin", "python"), *pip, "install", "--quiet",
                           "--disable-pip-version-check", "--no-index", "--no-deps",
                           *sorted(glob.glob(os.path.join(wheels, "*.whl")))])
    if done.returncode:
        sys.exit(done.returncode)
    with open(marker, "w") as f:
        f.write(build)
"""

# One round trip before anything else (python3 only: netspec may not be there yet): where
# netspec lives in this home, the Python's version, the build installed, this host's
# detached daemon if alive, and the key file a daemon kept there reads (netspecd's default:
# the user places it, KEY_HELP) if it is there. Copies of the controller's long-term key an
# older netspec stored in keys/ are removed, and counted.
BOOTSTRAP_SCRIPT = """
import json, os, shutil, sys
base = os.path.join(os.path.expanduser("~"), ".local", "share", "netspec")
out = {"base": base, "python": list(sys.version_info[:2]), "build": "", "key_file": "", "daemon": {},
       "removed_keys": 0}
try:
    out["build"] = open(os.path.join(base, "venv", "netspec.build")).read()
except OSError:
    pass
home = os.environ.get("NETSPEC_HOME") or os.path.join(os.path.expanduser("~"), ".config", "netspec")
key = os.environ.get("NETSPEC_KEY_FILE") or os.path.join(home, "key")
if os.path.isfile(key):
    out["key_file"] = key
keys = os.path.join(base, "keys")
if os.path.isdir(keys):
    out["removed_keys"] = len(os.listdir(keys))
    shutil.rmtree(keys, ignore_errors=True)
try:
    state = json.load(open(os.path.join(base, "daemons", sys.argv[1] + ".json")))
    os.kill(state["pid"], 0)
    out["daemon"] = state
except (OSError, ValueError, KeyError):
    pass
print(json.dumps(out))
"""


class SSHHost(Host):
    """A host with `ssh:` in the experiment file."""

    start_deadline_s = INSTALL_S + DAEMON_START_S

    def __init__(self, spec: HostSpec, accept_new: bool = False, detached: bool = False, run_id: str = ""):
        super().__init__(spec)
        assert spec.ssh is not None
        self.conn = SSHConnection(spec.name, resolve(spec.ssh), accept_new or spec.accept_new_host_key)
        self.detached = detached
        # A daemon for this run alone gets a key of this run's on its stdin, never stored
        # there; one kept (`up`, --keep-daemons) holds the key the user placed (KEY_HELP).
        self.run_key = None if detached else new_run_key()
        self.run_id = run_id  # the one run a daemon started for it sets up
        self.daemon: paramiko.Channel | None = None
        self.stderr_copy: threading.Thread | None = None  # the attached daemon's, ended by `stop`
        self.tunnel: Tunnel | None = None
        self.base = self.venv = ""
        self.started_here = False

    async def start(self, log_dir: Path) -> tuple[str, int]:
        return await asyncio.to_thread(self._start, log_dir)

    def reachable_at(self, facts: HostFacts) -> str:
        return facts.address or self.conn.target.hostname

    def _start(self, log_dir: Path) -> tuple[str, int]:
        found = self.prepare()
        port = found["daemon"].get("port")
        if port is None:
            self.started_here = not self.detached
            port = (self._start_detached(self._placed_key(found)) if self.detached
                    else self._start_attached(log_dir))
        elif not self.detached:  # the daemon kept there holds the key the user placed, not this run's
            self.run_key = None
        self.tunnel = Tunnel(self.conn, ("127.0.0.1", port))
        return "127.0.0.1", self.tunnel.open()

    def prepare(self) -> dict[str, Any]:
        """Connect and install this build of netspec if it is not there; returns what the
        bootstrap found (key_file, daemon)."""
        self.conn.open()
        found = self._bootstrap()
        if found["removed_keys"]:
            self.notes.append(f"removed {found['removed_keys']} copies of the controller's long-term key "
                             f"that an older netspec left in {found['base']}/keys")
        if found["python"] < [3, 11]:
            raise ConnectionLost(self.name, detail=f"{self.spec.python} there is Python "
                                 f"{'.'.join(map(str, found['python']))}; netspec needs 3.11 or newer")
        build = build_id()
        if found["build"] != build:
            self._install(build)
        return found

    def _placed_key(self, found: dict[str, Any]) -> str:
        """The key file a daemon kept on the host reads: the one the user placed there.

        Raises:
            ConnectionLost: there is none, saying how to place it.
        """
        if not found["key_file"]:
            raise ConnectionLost(self.name, detail=KEY_HELP.format(target=self.conn.target.hostname,
                                                                   key=default_key_file()))
        return found["key_file"]

    def _bootstrap(self) -> dict[str, Any]:
        status, out, err = self.conn.run([self.spec.python, "-c", BOOTSTRAP_SCRIPT, self.daemon_id])
        if status:
            raise ConnectionLost(self.name, detail=f"cannot run {self.spec.python} there: "
                                 f"{err.strip()[-500:]}")
        found = json.loads(out)
        self.base, self.venv = found["base"], f"{found['base']}/venv"
        return found

    def up(self) -> str:
        """Leave a detached daemon running (`ns_control up`); says what it did."""
        found = self.prepare()
        port = found["daemon"].get("port")
        if port is not None:
            return f"netspecd already running (port {port} on its 127.0.0.1)"
        return f"netspecd started (port {self._start_detached(self._placed_key(found))} on its 127.0.0.1)"

    def down(self) -> str:
        """Stop the detached daemon (`ns_control down`); says what it did."""
        self.conn.open()
        pid = self._bootstrap()["daemon"].get("pid")
        if pid is None:
            return "no netspecd was running"
        self.conn.run(["kill", "-TERM", str(pid)])
        deadline = time.monotonic() + STOP_S
        while self._bootstrap()["daemon"] and time.monotonic() < deadline:
            time.sleep(0.1)
        return "netspecd stopped"

    def _install(self, build: str) -> None:
        wheels = local_wheels(build)
        staging = f"{self.base}/wheels/{build}-{os.getpid()}-{self.name}"
        self.conn.run(["mkdir", "-p", staging])
        self.conn.put_files(wheels, staging)
        status, out, err = self.conn.run([self.spec.python, "-c", INSTALL_SCRIPT, self.base, build, staging],
                                         timeout=INSTALL_S)
        self.conn.run(["rm", "-rf", staging])
        if status:
            raise ConnectionLost(self.name, detail=f"installing netspec failed:\n{(out + err)[-2000:]}")

    async def place(self, programs: list[str]) -> dict[str, str]:
        return await asyncio.to_thread(self._place, programs)

    def _place(self, programs: list[str]) -> dict[str, str]:
        """A program already at the same path with the same content (a shared home, a
        deployed tree) is used as it is; any other is copied to programs/<digest>/."""
        if not programs:
            return {}
        _, out, _ = self.conn.run(["sha256sum", *programs])
        there = {line[66:]: line[:64] for line in out.splitlines()}
        placed = {}
        for program in programs:
            data = Path(program).read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if there.get(program) == digest:
                placed[program] = program
                continue
            where = f"{self.base}/programs/{digest[:16]}"
            self.conn.run(["mkdir", "-p", where])
            placed[program] = f"{where}/{Path(program).name}"
            self.conn.put(data, placed[program], mode=0o755)
        return placed

    @property
    def daemon_id(self) -> str:
        """One daemon per remote user and address (hosts sharing a home stay apart)."""
        t = self.conn.target
        return f"{t.user or 'user'}@{t.hostname}-{t.port}"

    def _netspecd(self, key: list[str]) -> list[str]:
        return [f"{self.venv}/bin/netspecd", "--listen", "127.0.0.1:0", *key,
                "--root", f"{self.base}/work/{self.daemon_id}"]

    def _start_attached(self, log_dir: Path) -> int:
        """netspecd started for this run, its key the first line of its stdin (the channel,
        encrypted by SSH; never on the host's disk), the rest of its stdin its lifeline."""
        assert self.run_key is not None
        only = ["--only-run", self.run_id] if self.run_id else []
        command = [*self._netspecd(["--run-key", "-", *only]), "--announce", "--lifeline"]
        chan = self.daemon = self.conn.start(command)
        chan.sendall((self.run_key.hex() + "\n").encode())
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_copy = threading.Thread(target=_copy_stderr, args=(chan, log_dir / "netspecd.log"),
                                            name=f"netspecd-stderr-{self.name}", daemon=True)
        self.stderr_copy.start()
        chan.settimeout(DAEMON_START_S)
        try:
            line = chan.makefile("r").readline()
        except TimeoutError:
            line = ""
        if not line:
            raise ConnectionLost(self.name, detail=f"netspecd did not start; see {log_dir / 'netspecd.log'}")
        chan.settimeout(None)
        return int(json.loads(line)["port"])

    def _start_detached(self, key_file: str) -> int:
        daemons = f"{self.base}/daemons"
        state, log = f"{daemons}/{self.daemon_id}.json", f"{daemons}/{self.daemon_id}.log"
        command = shlex.join([*self._netspecd(["--key", key_file]), "--state-file", state])
        # Started and waited for in one command, on the host. Asking from here each time cost
        # a round trip and a Python start on the host, which 64 hosts sharing a machine's
        # cores felt.
        polls = round(DAEMON_START_S / STATE_POLL_S)
        status, out, _ = self.conn.run(["sh", "-c", (
            f"mkdir -p {shlex.quote(daemons)} && rm -f {shlex.quote(state)} && "
            f"(setsid {command} >>{shlex.quote(log)} 2>&1 </dev/null &) && i=0 && "
            f"while [ ! -s {shlex.quote(state)} ]; do i=$((i + 1)); [ $i -gt {polls} ] && exit 3; "
            f"sleep {STATE_POLL_S} 2>/dev/null || sleep 1; done && cat {shlex.quote(state)}")],
            timeout=DAEMON_START_S + STOP_S)
        try:
            return int(json.loads(out)["port"]) if status == 0 else self._not_started(log)
        except (ValueError, KeyError, TypeError):
            return self._not_started(log)

    def _not_started(self, log: str) -> NoReturn:
        _, tail, _ = self.conn.run(["tail", "-n", "20", log])
        raise ConnectionLost(self.name, detail=f"netspecd did not start within {DAEMON_START_S:g} s; "
                             f"{log} says:\n{tail}")

    def run_files(self, run_id: str) -> RunFiles | None:
        if not self.base:  # `ns_control collect`, after the run's controller is gone
            self.conn.open()
            self._bootstrap()
        self.conn.run([f"{self.venv}/bin/netspecd", "--kill-run", run_id, "--host", self.name],
                      timeout=STOP_S)
        return SFTPRunFiles(self.conn, f"{self.base}/work/{self.daemon_id}/{safe_name(run_id, 'run id')}")

    async def stop(self, run_id: str = "") -> list[str]:
        return await asyncio.to_thread(self._stop, run_id)

    def _stop(self, run_id: str) -> list[str]:
        said = []
        if self.tunnel is not None:
            self.tunnel.close()
        clean = False
        if self.daemon is not None:
            # EOF on its stdin: the daemon resets its runs and exits. Its exit is waited for
            # STOP_S, no longer (paramiko's recv_exit_status waits for ever; the channel's
            # timeout does not bound it): one that does not exit is said, and closing the
            # channel below hangs up on it.
            with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                self.daemon.shutdown_write()
            if self.daemon.status_event.wait(STOP_S):
                clean = self.daemon.exit_status == 0
            else:
                said.append(f"netspecd did not exit within {STOP_S:g} s of its stdin's end: hung up on")
            # Its stderr's copy ends at the end of the stream, which its exit brought (or
            # closing the channel does, if it did not exit in time).
            self.daemon.close()
            self.daemon = None
        if self.stderr_copy is not None:
            self.stderr_copy.join(STOP_S)
            if self.stderr_copy.is_alive():  # a daemon thread: it goes with this process at worst
                said.append(f"the copy of netspecd's stderr did not end within {STOP_S:g} s")
            self.stderr_copy = None
        if run_id and self.started_here and not clean and self.conn.client is not None:
            # A daemon that died hard could not reset its run: end what it left behind.
            with contextlib.suppress(NetspecError, OSError, paramiko.SSHException):
                self.conn.run([f"{self.venv}/bin/netspecd", "--kill-run", run_id], timeout=STOP_S)
        self.conn.close()
        return said


def _copy_stderr(chan: paramiko.Channel, path: Path) -> None:
    with open(path, "ab") as log:
        while True:
            try:
                data = chan.recv_stderr(65536)
            except TimeoutError:
                continue  # the channel's start-up timeout; the daemon is still there
            except (OSError, EOFError):
                return
            if not data:
                return
            log.write(data)
            log.flush()


def for_each_host(specs: list[HostSpec], action: str, accept_new: bool = False,
                  fan_out: int = 16) -> dict[str, str | BaseException]:
    """`up` or `down` on every SSH host at once (at most `fan_out` handshakes at a time):
    each host's message, or the error that stopped it."""
    from concurrent.futures import ThreadPoolExecutor

    def one(spec: HostSpec) -> str | BaseException:
        host = SSHHost(spec, accept_new, detached=True)
        try:
            return host.up() if action == "up" else host.down()
        except (NetspecError, OSError, paramiko.SSHException) as exc:
            return exc
        finally:
            host.conn.close()

    with ThreadPoolExecutor(max_workers=fan_out) as pool:
        return dict(zip([s.name for s in specs], pool.map(one, specs), strict=True))
