"""run.json, the record a run leaves in its directory: the controller writes it
(controller/rundir.py); this module is the one that reads it, for the controller, the
merge and clksync alike.

run.json version history (readers accept every older version):
  1: first format (id, experiment, status, plan, programs, hosts, steps, components, error).
     Keys added since, each optional (a reader takes its absence as before): merge (why the
     run has no whole result set: --no-merge, or a merge interrupted), collected (what
     `ns_control collect` gathered: at, hosts, failed), error.gathered (a killed
     controller's run: whether collect gathered what its hosts held), share_hosts.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import ackjournal
from .errors import NetspecError

RUN_FORMAT = 1
# Each step's record as it ended, one JSON line each: a controller of a thousand hosts does
# not rewrite a megabytes-long run.json per step, and one killed mid-run still leaves every
# step it finished. run.json has them all once the run finished, and the journal goes (the
# ack journal too: protocol/ackjournal.py).
JOURNAL = "run.journal"
MERGED = "merged"  # the result set the merge makes of a run, under its directory


def load_record(run: Path) -> dict[str, Any]:
    """Read run.json of the run directory `run`.

    Raises:
        NetspecError: naming the file, when it is missing, unreadable, not a JSON object, or
            of a format newer than this netspec reads.
    """
    try:
        record = json.loads((run / "run.json").read_text())
    except (OSError, ValueError) as exc:
        raise NetspecError(f"{run}: no readable run.json ({exc})") from exc
    if not isinstance(record, dict):
        raise NetspecError(f"{run}/run.json: not a JSON object")
    if record.get("format", 1) > RUN_FORMAT:
        raise NetspecError(f"{run}/run.json has format {record['format']}; this netspec "
                           f"reads up to {RUN_FORMAT}: upgrade netspec")
    return ackjournal.fold(run, _with_journal(run, record))


def _with_journal(run: Path, record: dict[str, Any]) -> dict[str, Any]:
    """run.json with the steps the journal has and it has not (saved before they ended)."""
    try:
        lines = (run / JOURNAL).read_text().splitlines()
    except FileNotFoundError:
        return record
    except (OSError, ValueError) as exc:
        raise NetspecError(f"{run}/{JOURNAL}: unreadable ({exc})") from exc
    steps = record.setdefault("steps", [])
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
        except ValueError:
            if number == len(lines):  # the last line, cut short by a kill
                ackjournal.note_cut_short(record, {"file": JOURNAL, "line": number, "bytes": len(line)})
                break
            raise NetspecError(f"{run}/{JOURNAL}:{number}: not a JSON line") from None
        index = entry.pop("index", None) if isinstance(entry, dict) else None
        if not isinstance(index, int) or not 0 <= index <= len(steps):
            raise NetspecError(f"{run}/{JOURNAL}:{number}: step index {index!r} does not follow "
                               f"the {len(steps)} steps before it")
        if index == len(steps):
            steps.append(entry)
        elif "left_ns" in entry and "left_ns" not in steps[index]:
            steps[index] = entry  # its end, where run.json was saved while it ran
    return record


def cut_short_texts(record: dict[str, Any]) -> list[str]:
    """What the record says of its journals' last entries cut short by a kill."""
    texts, steps = [], record.get("steps") or []
    for cut in record.get("cut_short") or []:
        if "line" in cut:
            texts.append(f"cut short by a kill: {cut['file']} line {cut['line']} ({cut['bytes']} bytes): "
                         "a step's record as it was then is not in this record")
            continue
        step = cut.get("step")
        which = (f", step {step} '{steps[step].get('phase')}'"
                 if isinstance(step, int) and 0 <= step < len(steps) else "")
        texts.append(f"cut short by a kill: {cut['file']} frame {cut['frame']} "
                     f"({cut['bytes']} bytes{which}): the acks it held are not in this record")
    return texts


def controller_gone(record: dict[str, Any]) -> bool:
    """Whether the run says `running` while its controller, on this machine, has ended (its
    pid gone or reused): such a run was interrupted, whatever run.json still says."""
    controller = record.get("controller") or {}
    if (record.get("status") != "running" or controller.get("host") != socket.gethostname()
            or not controller.get("pid")):
        return False
    started = controller.get("pid_started")
    return started is None or process_start(controller["pid"]) != started


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot): a pid's identity, reused or not."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class RunRecord:
    """A run's record with typed accessors for what analysis reads of it."""

    path: Path
    data: dict[str, Any]

    @classmethod
    def load(cls, run: Path) -> RunRecord:
        """Raises NetspecError as `load_record` does."""
        return cls(run, load_record(run))

    @property
    def id(self) -> str:
        return self.data.get("id", self.path.name)

    @property
    def plan(self) -> dict[str, Any]:
        return self.data.get("plan") or {}

    @property
    def steps(self) -> list[dict[str, Any]]:
        """One entry per step run: phase, status, and per host its components' acks."""
        return self.data.get("steps") or []

    @property
    def hosts(self) -> dict[str, dict[str, Any]]:
        """Per host: how it was reached, its facts and its clock state at sync_clocks."""
        return self.data.get("hosts") or {}

    @property
    def clock_reference(self) -> str | None:
        """The host whose clock is the run's global timeline, if clocks were synchronised."""
        return (self.plan.get("clock") or {}).get("reference")

    @property
    def pairs(self) -> dict[str, dict[str, Any]]:
        return (self.plan.get("analysis") or {}).get("pairs") or {}

    @property
    def decoders(self) -> list[str]:
        """The user's own decoders the experiment file allows (analysis: decoders:)."""
        return list((self.plan.get("analysis") or {}).get("decoders") or [])

    @property
    def graph(self) -> dict[str, dict[str, Any]]:
        return (self.plan.get("analysis") or {}).get("graph") or {}

    @property
    def experiment_dir(self) -> Path:
        """Where the experiment file was: filters name their programs relative to it.

        Raises:
            KeyError: the record's plan does not say (a run.json netspec did not write).
        """
        return Path(self.plan["source"]).parent
