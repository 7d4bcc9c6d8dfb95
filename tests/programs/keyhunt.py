"""A NETSPEC-aware test program that hunts, in its phase (argv[1]), for the key its daemon
holds, as a program under test could: every file under /etc/netspec, and the memory,
environment and maps of each netspecd process it can see. It prints one JSON line of what
it found; its own memory is read the same way, so a refusal is the kernel's, not the method's."""

import glob
import json
import os
import sys
from pathlib import Path

from netspec import nodelib


def readable(pid: str) -> dict[str, str]:
    """What of process `pid` this process could read: each of maps, environ and a page of
    the first readable mapping through mem, "read" or the refusal's errno name."""
    said = {}
    try:
        with open(f"/proc/{pid}/maps") as f:
            first = next(line for line in f if line.split()[1].startswith("r"))
        said["maps"] = "read"
    except OSError as exc:
        said["maps"] = f"refused: {exc.strerror}"
        first = None
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            f.read()
        said["environ"] = "read"
    except OSError as exc:
        said["environ"] = f"refused: {exc.strerror}"
    try:
        with open(f"/proc/{pid}/mem", "rb") as f:
            if first is not None:
                f.seek(int(first.split("-")[0], 16))
                f.read(4096)
        said["mem"] = "read"
    except OSError as exc:
        said["mem"] = f"refused: {exc.strerror}"
    return said


def hunt(ctx: nodelib.PhaseContext) -> str:
    files = {}
    for path in glob.glob("/etc/netspec/**", recursive=True):
        if os.path.isfile(path):
            try:
                files[path] = Path(path).read_text()
            except OSError as exc:
                files[path] = f"refused: {exc.strerror}"
    daemons = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # The daemon itself (its interpreter, then its script), not an init that names it.
        if any(a.endswith(b"netspecd") for a in argv[:2]):
            daemons[entry] = readable(entry)
    print(json.dumps({"files": files, "daemons": daemons, "self": readable("self")}), flush=True)
    return ""


nodelib.register(sys.argv[1], hunt)
nodelib.run()
