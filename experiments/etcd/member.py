"""An etcd member (Debian's etcd-server, in netspec's image: `ns_control image build --package
etcd-server`), NETSPEC-aware: it claims the role "leader" while its etcd leads the cluster,
so that the experiment's faults can be aimed at whichever member leads at their instant.

In phase `listen` it publishes the address the other hosts reach it at; in phase `form` it
starts etcd as one of the members named in `params.members`, written to `cluster.json` in its
working directory, and waits until the cluster has a leader (`params.form_s`). Started again
by the schedule (a `start` after a `kill`), it starts etcd at once from that file, over its
own data directory, and rejoins. A watcher asks its etcd for its status every `poll_ms` and
claims "leader" (nodelib.claim) while it leads, letting go once it does not (or etcd does not
answer); each change is an ETCD/leader event (tag 1: gained, 0: lost). Asked to stop, it stops
etcd (SIGTERM, then SIGKILL after `stop_s`).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from netspec import nodelib

LEADER = nodelib.event("ETCD", "leader", "this member's etcd became (tag 1) or stopped being (0) the leader")
CLUSTER = Path("cluster.json")
CLIENT_PORT, PEER_PORT = 2379, 2380


def status(timeout_s: float) -> tuple[str, str]:
    """(this member's id, its leader's id) as its etcd says (the v3 JSON gateway)."""
    request = urllib.request.Request(f"http://127.0.0.1:{CLIENT_PORT}/v3/maintenance/status", data=b"{}",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as reply:
        said = json.load(reply)
    return said["header"]["member_id"], said.get("leader", "")


class Member:
    """One etcd process and its leadership watcher."""

    def __init__(self) -> None:
        self.etcd: subprocess.Popen[bytes] | None = None
        self.stop = threading.Event()
        self.leading = False
        self.poll_s = 0.05

    def start(self, config: dict[str, object]) -> None:
        me, members = str(config["name"]), dict(config["members"])  # type: ignore[call-overload]
        address = members[me]
        cluster = ",".join(f"{name}=http://{at}:{PEER_PORT}" for name, at in sorted(members.items()))
        self.poll_s = float(config.get("poll_ms", 50)) / 1e3  # type: ignore[arg-type]
        with open("etcd.log", "ab") as log:  # the child holds its own copy
            self.etcd = subprocess.Popen([
                "etcd", "--name", me, "--data-dir", f"{me}.etcd",
                "--listen-peer-urls", f"http://{address}:{PEER_PORT}",
                "--initial-advertise-peer-urls", f"http://{address}:{PEER_PORT}",
                "--listen-client-urls", f"http://{address}:{CLIENT_PORT},http://127.0.0.1:{CLIENT_PORT}",
                "--advertise-client-urls", f"http://{address}:{CLIENT_PORT}",
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", str(config["token"]),
                "--heartbeat-interval", str(config.get("heartbeat_ms", 50)),
                "--election-timeout", str(config.get("election_ms", 500)),
                "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self.stop.wait(self.poll_s):
            try:
                me, leader = status(self.poll_s * 4)
                leading = bool(leader) and leader == me
            except (OSError, ValueError, KeyError):  # not answering (starting, stopped): not leading
                leading = False
            if leading != self.leading:
                self.leading = leading
                nodelib.claim("leader", held=leading)
                LEADER.log(int(leading))

    def end(self, within_s: float) -> None:
        self.stop.set()
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.terminate()
            try:
                self.etcd.wait(within_s)
            except subprocess.TimeoutExpired:
                self.etcd.kill()
                self.etcd.wait()


MEMBER = Member()


@nodelib.phase()
def listen(ctx: nodelib.PhaseContext) -> str:
    ctx.publish(address=ctx.host_address)
    return f"at {ctx.host_address}"


@nodelib.phase()
def form(ctx: nodelib.PhaseContext) -> str:
    members = {name: ctx.lookup(name, "address") for name in ctx.params["members"]}
    config = {"name": ctx.component, "members": members, "token": ctx.run_id,
              **{k: ctx.params[k] for k in ("heartbeat_ms", "election_ms", "poll_ms") if k in ctx.params}}
    CLUSTER.write_text(json.dumps(config))
    MEMBER.start(config)
    give_up = time.monotonic() + float(ctx.params.get("form_s", 20))
    while time.monotonic() < give_up:
        try:
            me, leader = status(0.5)
            if leader:
                return f"member {me} of {len(members)}, leader {leader}"
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the cluster had no leader within {ctx.params.get('form_s', 20)} s "
                       f"(its log: {Path('etcd.log').resolve()})")


if CLUSTER.exists():  # started again by the schedule: etcd at once, over its own data
    MEMBER.start(json.loads(CLUSTER.read_text()))
try:
    nodelib.run()
finally:
    MEMBER.end(float(nodelib.component_params().get("stop_s", 10)))
