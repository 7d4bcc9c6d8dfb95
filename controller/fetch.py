"""Gather a host's files (outputs, exit status, handed-back files, streams) into the run
directory."""

from __future__ import annotations

from pathlib import Path

from netspec.protocol import messages as m

from .fleet import DaemonClient
from .rundir import RunDir

CHUNK = 4 * 1024 * 1024
STREAMED = ("stdout", "stderr")


async def fetch_host(client: DaemonClient, run: RunDir,
                     deadline: float) -> list[tuple[str, Path]]:
    """Copy every collectable file of the run on `client`'s host.

    Returns:
        (component, path written) for each file.

    Raises:
        DeadlineExceeded, ConnectionLost, RemoteError: from the daemon requests.
    """
    listing = await client.request(m.FILES, deadline, during="collect")
    written = []
    for entry in listing["files"]:
        target = run.gathered(client.host, entry["component"], entry["name"])
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry["name"] in STREAMED and target.is_file() and target.stat().st_size == entry["size"]:
            written.append((entry["component"], target))  # it all arrived as it was written
            continue
        if entry.get("missing"):
            target.with_name(target.name + ".missing").write_text(
                f"handed back but not found, or not a regular file, on host {client.host}: "
                f"{entry['path']}\n")
            continue
        partial = target.with_name(target.name + ".part")
        with open(partial, "wb") as f:
            offset = 0
            while True:
                part = await client.request(m.READ, deadline, during="collect",
                                            path=entry["path"], offset=offset, size=CHUNK)
                f.write(part["data"])
                offset += len(part["data"])
                if part["eof"]:
                    break
        partial.replace(target)
        written.append((entry["component"], target))
    return written
