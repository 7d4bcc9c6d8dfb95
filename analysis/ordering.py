"""The order that merges sorted runs of timestamps, compiled (numba): what a large merge
uses in place of sorting again. Imported only by a merge large enough to pay numba's start
(datastream.columns.COMPILED_FROM_BYTES)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def merge_order(ts, ends):
    """The order that merges the sorted runs of `ts` ending at `ends`: a k-way merge on a
    binary heap of runs, the earlier run first among equal times. Sorting the whole again
    would cost several times as much."""
    k = len(ends)
    at = np.empty(k, np.int64)  # each run's next record
    heap = np.empty(k, np.int64)
    size = 0
    for r in range(k):
        at[r] = ends[r - 1] if r else 0
        if at[r] == ends[r]:
            continue
        i = size
        size += 1
        while i > 0:  # sift up
            parent = (i - 1) // 2
            q = heap[parent]
            if ts[at[q]] < ts[at[r]] or (ts[at[q]] == ts[at[r]] and q < r):
                break
            heap[i] = q
            i = parent
        heap[i] = r
    order = np.empty(len(ts), np.int64)
    for o in range(len(ts)):
        r = heap[0]
        order[o] = at[r]
        at[r] += 1
        if at[r] == ends[r]:
            size -= 1
            r = heap[size]
        i = 0
        while True:  # sift r down from the top
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size:
                a, b = heap[child], heap[child + 1]
                if ts[at[b]] < ts[at[a]] or (ts[at[b]] == ts[at[a]] and b < a):
                    child += 1
            c = heap[child]
            if ts[at[r]] < ts[at[c]] or (ts[at[r]] == ts[at[c]] and r < c):
                break
            heap[i] = c
            i = child
        if size:
            heap[i] = r
    return order
