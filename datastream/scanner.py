"""The compiled scanner of a chunk body (numba): each record's leading integers and where
it lies, without a Python object per record. Imported only by a merge large enough to
pay numba's start (datastream.columns says when).

Compiled code checks no index: every read here is checked against the body's end first,
so a body of any bytes (a crafted one with a valid CRC too) is refused, never read past."""

from __future__ import annotations

import numba
import numpy as np

from .records import MISSING


@numba.njit(cache=True, nogil=True)
def _be(buf, p, n):
    v = np.uint64(0)
    for i in range(n):
        v = (v << np.uint64(8)) | np.uint64(buf[p + i])
    return v


@numba.njit(cache=True, nogil=True)
def _container(buf, p):
    """(items, header length) of an array at p, or (-1, 0) if none is there."""
    if p >= buf.shape[0]:
        return np.int64(-1), 0
    b = buf[p]
    if 0x90 <= b <= 0x9F:
        return np.int64(b - 0x90), 1
    if b == 0xDC and p + 3 <= buf.shape[0]:
        return np.int64(_be(buf, p + 1, 2)), 3
    if b == 0xDD and p + 5 <= buf.shape[0]:
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
def _length(buf, p, n):
    """The n-byte big-endian length at p, or -1 if the body ends before it does."""
    if p + n > buf.shape[0]:
        return np.int64(-1)
    return np.int64(_be(buf, p, n))


@numba.njit(cache=True, nogil=True)
def _skip(buf, p):
    """The offset just past the value at p, nested containers included; -1 if the body
    ends inside it or holds a byte no value begins with. A length read from the body is
    checked before it is used: one that runs past the end is the body's end."""
    todo = 1
    end = buf.shape[0]
    while todo > 0:
        if p >= end:
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
        elif b == 0xC4 or b == 0xD9 or b == 0xC5 or b == 0xDA or b == 0xC6 or b == 0xDB:
            w = 1 if (b == 0xC4 or b == 0xD9) else (2 if (b == 0xC5 or b == 0xDA) else 4)
            n = _length(buf, p + 1, w)
            if n < 0:
                return -1
            p += 1 + w + n
        elif b == 0xC7 or b == 0xC8 or b == 0xC9:
            w = 1 << (b - 0xC7)
            n = _length(buf, p + 1, w)
            if n < 0:
                return -1
            p += 2 + w + n  # the extension's type byte, then its data
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
        elif b == 0xDC or b == 0xDD or b == 0xDE or b == 0xDF:
            w = 2 if (b == 0xDC or b == 0xDE) else 4
            n = _length(buf, p + 1, w)
            if n < 0:
                return -1
            todo += n if b <= 0xDD else 2 * n
            p += 1 + w
        else:
            return -1  # 0xC1 is never used
        if p > end:
            return -1
    return p


@numba.njit(cache=True, nogil=True)
def scan_body(buf, out, offsets):
    """Fill out[i] = (item 0, ..., item n-1, items) and offsets[i] = (start, end) per
    record, n being out's width less one (columns.py gives schema.INT_ITEMS). Returns the
    number of records, or -1 if the body is not an array of arrays, exactly."""
    n = out.shape[1] - 1
    count, head = _container(buf, 0)
    if count < 0 or count > out.shape[0]:
        return -1
    p = head
    for i in range(count):
        start = p
        items, h = _container(buf, p)
        if items < 2:
            # Not a record (no array of an id and a time): skipped whole, its columns
            # MISSING, for the reader to count as malformed.
            p = _skip(buf, p)
            if p < 0:
                return -1
            for k in range(n):
                out[i, k] = MISSING
            out[i, n] = max(items, 0)
            offsets[i, 0] = start
            offsets[i, 1] = p
            continue
        p += h
        out[i, n] = items
        for k in range(n):
            if k < items:
                out[i, k], end = _int(buf, p)
                p = end if end >= 0 else _skip(buf, p)
                if p < 0 or p > buf.shape[0]:
                    return -1
            else:
                out[i, k] = MISSING
        for _ in range(n, items):
            p = _skip(buf, p)
            if p < 0 or p > buf.shape[0]:
                return -1
        offsets[i, 0] = start
        offsets[i, 1] = p
    if p != buf.shape[0]:
        return -1  # bytes after the records: msgpack's reading refuses them too
    return count
