"""A run's two journals, folded into its steps where run.json is read (runrecord.read_run,
the one door): the step journal, each step's record as it ended, one JSON line each (a
controller of a thousand hosts does not rewrite a megabytes-long run.json per step, and one
killed mid-run still leaves every step it finished), and the ack journal
(protocol/ackjournal.py), the acks a fan-out tree summarized. run.json has them all once the
run finished, and the journals go.

A journal's last entry cut short by a kill is not an error: each fold says it (a CutShort)
for the record to keep.
"""

from __future__ import annotations

from pathlib import Path

import msgpack
import msgspec

from . import ackjournal
from .errors import NetspecError
from .runstep import CutShort, Entry, Step, StepHost

JOURNAL = "run.journal"
_ENCODER = msgspec.json.Encoder()


class _Index(msgspec.Struct):
    index: int | None = None


def journal_line(index: int, step: Step) -> bytes:
    """Step `index` as a line of the journal: the step's JSON object led by its index."""
    return b'{"index":%d,' % index + _ENCODER.encode(step)[1:] + b"\n"


def fold_steps(run: Path, steps: list[Step]) -> CutShort | None:
    """Add to `steps` (run.json's) those the journal has and they have not (saved before
    they ended); the journal's last line, if a kill cut it short.

    Raises:
        NetspecError: naming the file and the line, when a line is not a step or out of order.
    """
    try:
        lines = (run / JOURNAL).read_bytes().splitlines()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise NetspecError(f"{run}/{JOURNAL}: unreadable ({exc})") from exc
    for number, line in enumerate(lines, 1):
        try:
            index = msgspec.json.decode(line, type=_Index).index
            entry = msgspec.json.decode(line, type=Step)
        except msgspec.ValidationError as exc:  # a DecodeError too: JSON, but not a step
            raise NetspecError(f"{run}/{JOURNAL}:{number}: not a step ({exc})") from None
        except msgspec.DecodeError:
            if number == len(lines):  # the last line, cut short by a kill
                return CutShort(JOURNAL, len(line), line=number)
            raise NetspecError(f"{run}/{JOURNAL}:{number}: not a JSON line") from None
        if index is None or not 0 <= index <= len(steps):
            raise NetspecError(f"{run}/{JOURNAL}:{number}: step index {index!r} does not follow "
                               f"the {len(steps)} steps before it")
        if index == len(steps):
            steps.append(entry)
        elif entry.left_ns is not None and steps[index].left_ns is None:
            steps[index] = entry  # its end, where run.json was saved while it ran
    return None


def fold_acks(run: Path, steps: list[Step]) -> CutShort | None:
    """Put every ack of the run's ack journal, if it has one, in its step of `steps`; the
    journal's last frame, if a kill cut it short. An entry the step has already (recorded as
    itself) stays as it is.

    Raises:
        NetspecError: naming the file and the frame, when a frame is malformed.
    """
    try:
        data = (run / ackjournal.ACK_JOURNAL).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise NetspecError(f"{run}/{ackjournal.ACK_JOURNAL}: unreadable ({exc})") from exc
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    # A frame cut short by a kill is the file's end: the unpacker stops before it.
    number = read = 0
    for number, item in enumerate(unpacker, 1):
        read = unpacker.tell()  # after the loop, a frame cut short may have moved it on
        try:
            index, received, records, *encoding = item
            if not (isinstance(index, int) and 0 <= index < len(steps) and isinstance(received, int)
                    and isinstance(records, bytes) and encoding in ([], [ackjournal.ZLIB])):
                raise ValueError("not [step index, received_ns, records(, zlib)] of a step in run.json")
            step = steps[index]
            if not step.hosts:
                step.hosts = {}
            for host, component, entry in ackjournal.entries(records, bool(encoding)):
                info = step.hosts.setdefault(host, StepHost(components={}))
                if component not in info.components:
                    info.components[component] = msgspec.convert(
                        {**entry, "received_ns": received, "outcome": "ok"}, Entry)
                info.done_ns = max(info.done_ns or 0, received)
                if info.sent_ns is None:
                    info.sent_ns = step.sent_ns
        except (TypeError, ValueError, msgspec.ValidationError) as exc:
            raise NetspecError(f"{run}/{ackjournal.ACK_JOURNAL}: frame {number}: {exc}") from None
    if read < len(data):
        return CutShort(ackjournal.ACK_JOURNAL, len(data) - read, frame=number + 1,
                        step=ackjournal.step_of(data[read:]))
    return None
