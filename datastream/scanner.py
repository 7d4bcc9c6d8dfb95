"""The compiled scanner of a chunk body (numba): each record's leading integers and where
it lies, without a Python object per record. Imported only by a merge large enough to
pay numba's start (datastream.columns says when)."""

from __future__ import annotations

import numba
import numpy as np

from .columns import MISSING


@numba.njit(cache=True, nogil=True)
def _be(buf, p, n):
    v = np.uint64(0)
    for i in range(n):
        v = (v << np.uint64(8)) | np.uint64(buf[p + i])
    return v


@numba.njit(cache=True, nogil=True)
def _container(buf, p):
    """(items, header length) of an array at p, or (-1, 0) if none is there."""
    b = buf[p]
    if 0x90 <= b <= 0x9F:
        return np.int64(b - 0x90), 1
    if b == 0xDC:
        return np.int64(_be(buf, p + 1, 2)), 3
    if b == 0xDD:
        return np.int64(_be(buf, p + 1, 4)), 5
    return np.int64(-1), 0


@numba.njit(cache=True, nogil=True)
def _int(buf, p):
    """(the integer at p, the offset past it), or (MISSING, -1) for any other value."""
    if p >= buf.shape[0]:
        return MISSING, -1
    b = buf[p]
    if b <= 0x7F:
        return np.int64(b), p + 1
    if b >= 0xE0:
        return np.int64(b) - 256, p + 1
    if 0xCC <= b <= 0xCF:
        n = 1 << (b - 0xCC)
        if p + 1 + n > buf.shape[0]:
            return MISSING, -1
        v = _be(buf, p + 1, n)
        if v > np.uint64(0x7FFFFFFFFFFFFFFF):
            return MISSING, p + 1 + n
        return np.int64(v), p + 1 + n
    if 0xD0 <= b <= 0xD3:
        n = 1 << (b - 0xD0)
        if p + 1 + n > buf.shape[0]:
            return MISSING, -1
        v = np.int64(_be(buf, p + 1, n))
        bits = 8 * n
        if bits < 64 and v >= (np.int64(1) << (bits - 1)):
            v -= np.int64(1) << bits
        return v, p + 1 + n
    return MISSING, -1


@numba.njit(cache=True, nogil=True)
def _skip(buf, p):
    """The offset just past the value at p, nested containers included."""
    todo = 1
    while todo > 0:
        if p >= buf.shape[0]:
            return -1
        todo -= 1
        b = buf[p]
        if b <= 0x7F or b >= 0xE0 or b == 0xC0 or b == 0xC2 or b == 0xC3:
            p += 1
        elif 0x80 <= b <= 0x8F:
            todo += 2 * (b - 0x80)
            p += 1
        elif 0x90 <= b <= 0x9F:
            todo += b - 0x90
            p += 1
        elif 0xA0 <= b <= 0xBF:
            p += 1 + (b - 0xA0)
        elif b == 0xC4 or b == 0xD9:
            p += 2 + buf[p + 1]
        elif b == 0xC5 or b == 0xDA:
            p += 3 + np.int64(_be(buf, p + 1, 2))
        elif b == 0xC6 or b == 0xDB:
            p += 5 + np.int64(_be(buf, p + 1, 4))
        elif b == 0xC7:
            p += 3 + buf[p + 1]
        elif b == 0xC8:
            p += 4 + np.int64(_be(buf, p + 1, 2))
        elif b == 0xC9:
            p += 6 + np.int64(_be(buf, p + 1, 4))
        elif b == 0xCA:
            p += 5
        elif b == 0xCB:
            p += 9
        elif 0xCC <= b <= 0xCF:
            p += 1 + (1 << (b - 0xCC))
        elif 0xD0 <= b <= 0xD3:
            p += 1 + (1 << (b - 0xD0))
        elif 0xD4 <= b <= 0xD8:
            p += 2 + (1 << (b - 0xD4))
        elif b == 0xDC:
            todo += np.int64(_be(buf, p + 1, 2))
            p += 3
        elif b == 0xDD:
            todo += np.int64(_be(buf, p + 1, 4))
            p += 5
        elif b == 0xDE:
            todo += 2 * np.int64(_be(buf, p + 1, 2))
            p += 3
        elif b == 0xDF:
            todo += 2 * np.int64(_be(buf, p + 1, 4))
            p += 5
        else:
            return -1  # 0xC1 is never used
    return p


@numba.njit(cache=True, nogil=True)
def scan_body(buf, out, offsets):
    """Fill out[i] = (id, ts, a2, a3, items) and offsets[i] = (start, end) per record.
    Returns the number of records, or -1 if the body is not an array of arrays."""
    count, head = _container(buf, 0)
    if count < 0 or count > out.shape[0]:
        return -1
    p = head
    for i in range(count):
        start = p
        items, h = _container(buf, p)
        if items < 2:
            return -1
        p += h
        out[i, 4] = items
        for k in range(4):
            if k < items:
                out[i, k], end = _int(buf, p)
                p = end if end >= 0 else _skip(buf, p)
                if p < 0 or p > buf.shape[0]:
                    return -1
            else:
                out[i, k] = MISSING
        for _ in range(4, items):
            p = _skip(buf, p)
            if p < 0 or p > buf.shape[0]:
                return -1
        offsets[i, 0] = start
        offsets[i, 1] = p
    return count
