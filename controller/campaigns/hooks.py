"""A campaign's hook commands: on the controller, or on named hosts (this machine for a local
host, over SSH for an ssh host). Every output goes to the campaign's hooks.log; a hook that
fails raises HookFailed naming the stage, the host and the reason."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from netspec.protocol.errors import NetspecError

from ..experiment.model import Hook, Plan
from ..experiment.sshtargets import resolve
from ..hosts.ssh import SSHConnection

HOOK_TIMEOUT_S = 600.0


class HookFailed(NetspecError):
    """A hook command could not be run, or ended badly."""


def run_hook(hook: Hook, stage: str, plan: Plan, env: dict[str, str], log: Path,
             accept_new_host_keys: bool = False) -> None:
    """Run `hook` on each of its hosts in turn (on the controller if it names none).

    Raises:
        HookFailed: the first host where it fails, with the tail of its output.
    """
    hosts = {h.name: h for h in plan.hosts}
    for name in hook.hosts or (None,):
        where = f"host {name}" if name else "the controller"
        ssh = hosts[name].ssh if name else None
        try:
            if ssh:
                accept = accept_new_host_keys or hosts[name].accept_new_host_key
                conn = SSHConnection(name, resolve(ssh), accept)
                conn.open()
                try:
                    argv = ["env", *(f"{k}={v}" for k, v in env.items()), *hook.command]
                    code, out, err = conn.run(argv, timeout=HOOK_TIMEOUT_S)
                finally:
                    conn.close()
            else:
                done = subprocess.run(hook.command, env={**os.environ, **env}, capture_output=True, text=True,
                                      timeout=HOOK_TIMEOUT_S, check=False)
                code, out, err = done.returncode, done.stdout, done.stderr
        except (OSError, subprocess.TimeoutExpired, NetspecError) as exc:
            raise HookFailed(f"{stage} hook `{shlex.join(hook.command)}` on {where}: {exc}") from exc
        with open(log, "a") as f:
            f.write(f"--- {stage} on {where}: {shlex.join(hook.command)} -> exit {code}\n{out}{err}")
        if code != 0:
            tail = (err or out).strip().splitlines()[-1:] or ["no output"]
            raise HookFailed(f"{stage} hook `{shlex.join(hook.command)}` on {where} exited {code}: {tail[0]} "
                             f"(all of it in {log})")
