"""The merge's unit of work: records in global time as columns (`Batch`), with the string
dictionaries every source shares and the merge's counts."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

BATCH_RECORDS = 1 << 16
# Kinds from histogram on are decoded record by record in the merge (source.py).
KINDS = ("event", "interval", "counter", "operation", "histogram", "samples", "admin", "unknown")


class Names:
    """A growing dictionary of strings: the codes a column's indices refer to."""

    def __init__(self, fixed: tuple[str, ...] = ()):
        self.codes: dict[str, int] = {n: i for i, n in enumerate(fixed)}
        self.names: list[str] = list(fixed)
        self._adding = threading.Lock()  # sources decode in worker threads

    def code(self, name: str) -> int:
        c = self.codes.get(name)
        if c is None:
            with self._adding:
                c = self.codes.get(name)
                if c is None:
                    self.names.append(name)
                    c = self.codes[name] = len(self.names) - 1
        return c

    def array(self, indices: np.ndarray) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()),
                                              pa.array(self.names, pa.string()))


@dataclass
class Batch:
    """Records in global time, as columns; string columns hold Names codes."""

    ts: np.ndarray
    bound: np.ndarray  # -1 where the host's clock could not be fitted
    host: np.ndarray
    component: np.ndarray
    stream: np.ndarray
    entity: np.ndarray
    kind: np.ndarray
    tag: np.ndarray  # MISSING where none
    value: np.ndarray  # NaN where none
    value_int: np.ndarray  # the value where it is an int64, exact; MISSING where not
    start: np.ndarray  # MISSING where none
    data: pa.StringArray  # JSON text or null; Arrow's, since numpy would hold Python objects
    ts_local: np.ndarray

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, index: np.ndarray) -> Batch:
        return Batch(*(_take_texts(self.data, index) if f == "data" else getattr(self, f)[index]
                       for f in _FIELDS))

    def slice(self, start: int, stop: int | None = None) -> Batch:
        """Rows start:stop, without a copy."""
        return Batch(*(getattr(self, f)[start:stop] for f in _FIELDS))

    def in_order(self) -> bool:
        return bool(np.all(self.ts[1:] >= self.ts[:-1]))

    @classmethod
    def concat(cls, batches: list[Batch]) -> Batch:
        return cls(*(pa.concat_arrays([b.data for b in batches]) if f == "data"
                     else np.concatenate([getattr(b, f) for b in batches]) for f in _FIELDS))


_FIELDS = tuple(Batch.__dataclass_fields__)


def _take_texts(texts: pa.StringArray, index: np.ndarray) -> pa.StringArray:
    # Most batches hold no text at all: nulls cost nothing to make, a take does.
    return pa.nulls(len(index), pa.string()) if texts.null_count == len(texts) else texts.take(index)


@dataclass
class Dictionaries:
    """The string dictionaries every source shares."""

    host: Names = field(default_factory=Names)
    component: Names = field(default_factory=Names)
    stream: Names = field(default_factory=Names)
    entity: Names = field(default_factory=Names)
    kind: Names = field(default_factory=lambda: Names(KINDS))


@dataclass
class Counts:
    records: int = 0
    samples: int = 0
    late: int = 0
    late_worst_ns: int = 0
    unfitted_hosts: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
