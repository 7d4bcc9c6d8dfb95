"""The run directory: everything one run produced, and run.json, its record (the typed
record and its reader: protocol/runrecord.py; its outcome: protocol/runoutcome.py).

Layout:
    runs/<experiment>/<UTC time>-<short id>/
        experiment.yaml, run.json, programs/ (copies of the programs started),
        hosts/<host>/facts.json, hosts/<host>/<component>/...
    runs/latest -> the newest run
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
from netspec.protocol import ackjournal
from netspec.protocol.errors import NetspecError
from netspec.protocol.names import confined, safe_name
from netspec.protocol.runoutcome import RunOutcome, controller_ended
from netspec.protocol.runrecord import (
    JOURNAL,
    RUN_FORMAT,
    Collected,
    Controller,
    Program,
    RunRecord,
    RunStatus,
    controller_gone,
    encode,
    fold_acks,
    journal_line,
    process_start,
    read_run,
)


def utc_iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="microseconds")


class RunDir:
    """A run's directory; `record` is saved as run.json after every change that matters."""

    def __init__(self, path: Path, record: RunRecord):
        self.path, self.record = path, record
        self._held: dict[tuple[str, ...], BinaryIO] = {}  # outputs and journals, open while written

    @classmethod
    def open(cls, path: Path) -> RunDir:
        """The run directory `path` with its record as read (runrecord.read_run).

        Raises:
            NetspecError: as `read_run`.
        """
        return cls(path, read_run(path))

    @classmethod
    def create(cls, runs_root: Path, experiment: str, text: str, **fields: Any) -> RunDir:
        """A new run directory of `experiment` under `runs_root`, its record running with
        `fields` (RunRecord's) set."""
        now = time.time_ns()
        run_id = f"{datetime.fromtimestamp(now / 1e9, UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        path = runs_root / experiment / run_id
        path.mkdir(parents=True)
        (path / "experiment.yaml").write_text(text)
        run = cls(path, RunRecord(format=RUN_FORMAT, id=run_id, experiment=experiment,
                                  status=RunStatus.RUNNING, started=utc_iso(now), started_ns=now,
                                  controller=Controller(socket.gethostname(), os.getpid(),
                                                        process_start(os.getpid())), **fields))
        run.save()
        latest = runs_root / "latest"
        tmp = runs_root / f".latest-{run_id}"
        tmp.symlink_to(path.relative_to(runs_root))
        os.replace(tmp, latest)
        return run

    @property
    def id(self) -> str:
        return self.record.id

    def host_dir(self, host: str) -> Path:
        path = self.path / "hosts" / host
        path.mkdir(parents=True, exist_ok=True)
        return path

    def component_dir(self, host: str, component: str) -> Path:
        path = self.host_dir(host) / component
        path.mkdir(parents=True, exist_ok=True)
        return path

    def gathered(self, host: str, component: str | None, name: str) -> Path:
        """Where a host's file goes: under the host (its streams: no component) or under
        its component; every name a host sends is checked before it becomes a path."""
        base = self.host_dir(host) if component is None else self.component_dir(
            host, safe_name(component, "component"))
        return confined(base, name, "file name")

    def keep_programs(self, paths: list[str]) -> None:
        """Copy each program the run starts, with its sha256, so the run can be repeated
        with exactly the code it ran."""
        kept = self.record.programs = dict(self.record.programs)
        for source in sorted(set(paths)):
            data = Path(source).read_bytes()
            target = self.path / "programs" / f"{len(kept)}-{Path(source).name}"
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(data)
            kept[source] = Program(hashlib.sha256(data).hexdigest(), str(target.relative_to(self.path)))
        self.save()

    def write_json(self, path: Path, data: Any) -> None:
        """Write `data` (plain values or a record) as compact JSON, replacing `path` whole."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(msgspec.json.encode(data, enc_hook=str) + b"\n")
        os.replace(tmp, path)

    def save(self) -> None:
        """Write run.json: the record as it is now (runrecord.encode)."""
        tmp = self.path / "run.json.tmp"
        tmp.write_bytes(encode(self.record) + b"\n")
        os.replace(tmp, self.path / "run.json")

    def journal_step(self, index: int) -> None:
        """Append step `index`'s record as it is now (at its start, at its end) to the
        journal: O(its hosts) bytes, where saving run.json is O(the whole run)."""
        self._append((JOURNAL,), journal_line(index, self.record.steps[index]))

    def journal_acks(self, index: int, received_ns: int, records: bytes, compressed: bool = False) -> None:
        """Append the records of a summary of step `index`'s acks, unread (ackjournal.py)."""
        self._append((ackjournal.ACK_JOURNAL,), ackjournal.frame(index, received_ns, records, compressed))

    def append_output(self, host: str, component: str, stream: str, data: bytes) -> None:
        """Keep output as it streams in, so a lost daemon still leaves what it sent."""
        self._append((host, component, stream), data)

    def _append(self, name: tuple[str, ...], data: bytes) -> None:
        """One write, unbuffered, to a file held open (`name`: a journal's, or a host's
        component's output's): a killed controller leaves all it wrote but the entry it was
        writing (which the readers of the journals say)."""
        f = self._held.get(name)
        if f is None:
            path = self.path / name[0] if len(name) == 1 else self.component_dir(*name[:2]) / name[2]
            f = self._held[name] = open(path, "ab", buffering=0)  # noqa: SIM115 - held open while written
        f.write(data)

    def close_files(self) -> None:
        """Close the outputs and journals held open; a later write opens its file again."""
        for f in self._held.values():
            f.close()
        self._held.clear()

    def finish(self, outcome: RunOutcome) -> None:
        """End the run's record with `outcome` (its status and error), every ack of the ack
        journal folded in, and remove the journals: run.json has every step and ack now."""
        self.close_files()
        now = time.time_ns()
        record = self.record
        record.status, record.error = outcome.status, outcome.error
        record.ended, record.ended_ns, record.duration_s = utc_iso(now), now, (now - record.started_ns) / 1e9
        fold_acks(self.path, record)
        self.save()
        # run.json has every step and ack now
        (self.path / JOURNAL).unlink(missing_ok=True)
        (self.path / ackjournal.ACK_JOURNAL).unlink(missing_ok=True)


def settle(path: Path, record: RunRecord) -> RunRecord:
    """`record` as it is, or, for a run whose controller on this machine is gone while it
    says `running`, marked interrupted (and saved) in the step it was in: no run stays
    `running` for ever."""
    if not controller_gone(record):
        return record
    outcome = RunOutcome.gone(record)
    run = RunDir(path, record)
    run.finish(outcome)
    return run.record


def note_collected(run: RunDir, found: dict[str, Any]) -> None:
    """Say in run.json what `ns_control collect` gathered (`found`: host -> its Salvaged),
    in the error of a run whose controller ended without gathering it. `collected.at` is
    when files were last gathered: a later collect that copies none (those it finds were
    gathered whole before) leaves it (and what each host's `salvaged` lists) as it was, and
    says only what failed now."""
    now = time.time_ns()
    failed = {host: salvaged.summary() for host, salvaged in found.items() if salvaged.error}
    record = run.record
    if record.collected is None or any(salvaged.copied for salvaged in found.values()):
        record.collected, record.collected_ns = Collected(utc_iso(now), len(found), failed), now
    else:  # a collect that gathered nothing more: when the files were gathered stays as it was
        record.collected.hosts, record.collected.failed = len(found), failed
    error = record.error
    # Before run.json said "gathered", it ended its message with what collect gathers now.
    if error is not None and (error.gathered is False or error.message.endswith("was not gathered")):
        got = (f"from {len(found) - len(failed)} of {len(found)} hosts" if failed else
               f"from its {len(found)} host{'s' if len(found) > 1 else ''}")
        error.gathered = True
        error.message = (f"{controller_ended(record)}: what the hosts held was gathered later by "
                         f"`ns_control collect` at {utc_iso(now)} {got}" if found else
                         f"{controller_ended(record)}, before it reached a host: nothing was left to gather")
        error.causes = [*error.causes, *(f"host {h}: collect: {said}" for h, said in sorted(failed.items()))]
    run.save()


def note_merge(path: Path, note: str | None) -> None:
    """Say in run.json how the run's merge went (`note`: why it has no whole result set;
    None: it has one now). A run still running is its controller's to save: left alone."""
    record = read_run(path)
    if record.merge == note or record.status == RunStatus.RUNNING:
        return
    record.merge = note
    RunDir(path, record).save()


def find_run(runs_root: Path, ref: str) -> Path:
    """A run by path, by 'latest', or by (a unique suffix of) its id."""
    if ref == "latest":
        if not (runs_root / "latest").exists():
            runs = list_runs(runs_root)
            if not runs:
                raise NetspecError(f"no runs under {runs_root}")
            return runs[-1][0]
        ref = str(runs_root / "latest")
    path = Path(ref)
    if (path / "run.json").is_file():
        return path.resolve()
    matches = [p.parent for p in runs_root.glob("*/*/run.json") if p.parent.name.endswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NetspecError(f"no run '{ref}' under {runs_root}")
    raise NetspecError(f"'{ref}' matches {len(matches)} runs: be more specific")


def list_runs(runs_root: Path, unreadable: list[str] | None = None) -> list[tuple[Path, RunRecord]]:
    """Every run under `runs_root` with its record, oldest first; a run whose record cannot
    be read is left out, and said in `unreadable` if given."""
    runs = []
    for path in sorted(runs_root.glob("*/*/run.json")):
        try:
            runs.append((path.parent, settle(path.parent, read_run(path.parent))))
        except NetspecError as exc:
            if unreadable is not None:
                unreadable.append(str(exc))
    runs.sort(key=lambda r: r[1].started_ns)
    return runs
