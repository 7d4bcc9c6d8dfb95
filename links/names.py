"""What a run's link conditions are named on a host, all from the run's id, so that a run
never touches another's and a killed daemon's leftovers are found by name (sweep.py); and
the one way the backends run their tools (tc, nft, iptables)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

TOOL_S = 10.0  # one tool's run: they answer in milliseconds, a hung one is not waited on


class ToolFailed(Exception):
    """A tool exited non-zero (or could not run); its message is the command and its stderr."""


def tag(run_id: str) -> str:
    """Eight hex digits of the run id's hash: short enough for every name the kernel takes."""
    return hashlib.blake2b(run_id.encode(), digest_size=4).hexdigest()


def table(run_id: str) -> str:
    """The run's nftables table (family inet)."""
    return f"netspec_{tag(run_id)}"


def chain(run_id: str) -> str:
    """The run's iptables chain (filter table), jumped to from OUTPUT."""
    return f"NETSPEC_{tag(run_id)}"


def handle(run_id: str) -> int:
    """The major number of the run's root htb qdisc: 0x100..0xfeff (never 0 nor ffff)."""
    return 0x100 + int(tag(run_id)[:4], 16) % 0xfe00


def queue(run_id: str) -> int:
    """The run's NFQUEUE number: 0x1000..0xfffe, far above the small numbers people use."""
    return 0x1000 + int(tag(run_id)[4:], 16) % 0xeffe


def mark(run_id: str) -> int:
    """The firewall mark of the user-space path's copies (nfqueue.py), which the rule that
    queues a peer's packets lets by: 0x6e73 ("ns") in its top half, the run's in the rest,
    leaving out the bits 0x4000 and 0x8000 that kube-proxy's rules read. A mark never leaves
    its network namespace (the kernel clears it when a packet crosses into another)."""
    return 0x6E730000 | int(tag(run_id)[4:], 16) & 0x3FFF


def binary(name: str) -> str | None:
    """A tool's path: on PATH, or in /usr/sbin and /sbin (an SSH login's PATH may lack them)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")


def run(argv: list[str], stdin: str | None = None) -> str:
    """Run a tool; its stdout.

    Raises:
        ToolFailed: it is missing, exited non-zero or took over TOOL_S.
    """
    path = binary(argv[0])
    if path is None:
        raise ToolFailed(f"{argv[0]}: not found")
    try:
        done = subprocess.run([path, *argv[1:]], input=stdin, capture_output=True, text=True,
                              timeout=TOOL_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolFailed(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode:
        raise ToolFailed(f"{' '.join(argv)}: {done.stderr.strip()[-400:] or f'exit {done.returncode}'}")
    return done.stdout
