"""A host whose daemon was lost, gathered without it: every stream and output of the run that
reached the host's disk is copied into the run directory, read from the local filesystem
(a local host) or over SFTP (an SSH host), and then the host's copy is removed.

What the daemon would have listed (`files`) is found by the layout it writes:
`<run>/streams/*.ds` and `<run>/<component>/{stdout,stderr,exit.json}`. Files a component
handed back live in its work directory, which only the daemon could name: they are counted
as left behind, never guessed at.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from netspec.protocol.errors import NetspecError
from netspec.protocol.runrecord import HostRecord, Salvage

from ..hosts.runfiles import RunFiles
from ..record.rundir import RunDir

OUTPUTS = ("stdout", "stderr", "exit.json")


@dataclass
class Salvaged:
    """What a salvage gathered from one host, as run.json records it."""

    via: str = ""
    source: str = ""  # the run's directory on the host
    files: list[tuple[str | None, Path]] = field(default_factory=list)  # those gathered whole before too
    copied: int = 0  # of those, the files this salvage copied
    bytes: int = 0
    left: list[str] = field(default_factory=list)  # files found but not gathered
    removed: bool = False
    error: str = ""
    swept: list[str] = field(default_factory=list)  # what a later daemon ended of the run's leftovers

    def record(self, run: Path) -> Salvage:
        """As run.json keeps it, each file relative to the run directory `run`."""
        return Salvage(self.via, self.source, [str(p.relative_to(run)) for _, p in self.files], self.bytes,
                       self.left, self.removed, self.error, self.swept)

    def summary(self) -> str:
        """One line for people."""
        if not self.via:
            return "; ".join([f"nothing salvaged: {self.error}", *self.swept])
        said = [f"{len(self.files)} files ({self.bytes / 1e6:.1f} MB) over {self.via}"]
        if self.left:
            said.append(f"{len(self.left)} left on the host (the daemon alone knew which to gather)"
                        if not self.error else f"{len(self.left)} left on the host")
        said.append(f"error: {self.error}" if self.error else "its leftovers removed")
        return "; ".join(said)


async def salvage_hosts(sources: dict[str, Callable[[], RunFiles | None]], run: RunDir,
                        deadline: float, swept: dict[str, list[str]] | None = None) -> dict[str, Salvaged]:
    """Salvage each host whose daemon was lost, by the loop-time `deadline`: `sources`
    gives each host's `Host.run_files`. Each host's salvage, or why there was none, is
    recorded in run.json under the host's `salvaged`, beside what an earlier one gathered,
    with what `swept` says was ended of the run's leftovers on a host none can salvage."""
    async def one(host: str) -> Salvaged:
        try:
            source = await asyncio.to_thread(sources[host])
            if source is None:
                return Salvaged(error="its files stay on the host: a daemon at an address is "
                                "reached only through itself", swept=(swept or {}).get(host, []))
            return await asyncio.to_thread(salvage, source, run, host)
        except (OSError, NetspecError) as exc:
            return Salvaged(error=f"salvage failed: {exc}")
    if not sources:
        return {}
    try:
        async with asyncio.timeout_at(deadline):
            found = dict(zip(sources, await asyncio.gather(*map(one, sources)), strict=True))
    except TimeoutError:
        found = {h: Salvaged(error="the collect's deadline passed first") for h in sources}
    for host, salvaged in found.items():  # what an earlier salvage of the host gathered is kept
        record = run.record.hosts.setdefault(host, HostRecord())
        record.salvaged = salvaged.record(run.path).after(record.salvaged)
    run.save()
    return found


def salvage(source: RunFiles, run: RunDir, host: str) -> Salvaged:
    """Copy what `source` holds of the run into `run` as `fetch` would have, then remove it.

    A file already gathered whole (an output streamed live) is kept as it is. If anything
    could not be copied, the host's copy stays for a later `ns_control collect`.
    """
    found = Salvaged(source.where, str(source.root))
    for relative, size in source.listing():
        target = _target(run, host, relative)
        if target is None:
            found.left.append(relative)
            continue
        component, path = target
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size >= size:
            found.files.append((component, path))
            continue
        partial = path.with_name(path.name + ".part")
        try:
            found.bytes += source.copy(relative, partial)
        except (OSError, NetspecError) as exc:
            found.error = f"{relative}: {exc}"
            found.left.append(relative)
            partial.unlink(missing_ok=True)
            continue
        partial.replace(path)
        found.files.append((component, path))
        found.copied += 1
    if not found.error:
        try:
            source.remove()
            found.removed = True
        except (OSError, NetspecError) as exc:
            found.error = f"leftovers not removed: {exc}"
    return found


def _target(run: RunDir, host: str, relative: str) -> tuple[str | None, Path] | None:
    """Where a file of the host's run directory goes in the run directory (as `fetch` puts
    it), or None for a file that is not gathered."""
    parts = relative.split("/")
    if len(parts) != 2:
        return None
    if parts[0] == "streams" and parts[1].endswith(".ds"):
        return None, run.gathered(host, None, relative)
    if parts[1] in OUTPUTS:
        return parts[0], run.gathered(host, parts[0], parts[1])
    return None


