"""A JSON record that says its format: run.json (runrecord.py) and campaign.json
(campaignrecord.py) are read alike, their format first (one newer than this netspec reads is
refused before anything else of it), then the whole record into its Structs."""

from __future__ import annotations

import functools
from typing import TypeVar

import msgspec

from .errors import NetspecError

T = TypeVar("T")


class _Format(msgspec.Struct):
    format: int | None = None  # None: a record of the first format, which did not say it


@functools.cache
def _decoder(kind: type[T]) -> msgspec.json.Decoder[T]:
    return msgspec.json.Decoder(kind)


def decode_versioned(data: bytes, where: str, kind: type[T], newest: int, what: str) -> T:
    """`data` as a `kind` (`what`, for people; its `format` field says its version), of a
    format up to `newest`. Parsed once when it fits; its format alone is read only to say
    why one does not (a newer netspec's, or a first-format record that did not say it).

    Raises:
        NetspecError: naming `where`, when it is not JSON, not a `what` (a key of the wrong
            type, named with its place), or of a format newer than `newest`.
    """
    try:
        record = _decoder(kind).decode(data)
    except msgspec.ValidationError as exc:
        version = _format(data, where, what)
        if version is None:  # the first format: read as it says the first one is
            try:
                return msgspec.convert({**msgspec.json.decode(data), "format": 1}, kind)
            except msgspec.ValidationError as first:
                raise NetspecError(f"{where}: not a {what}: {first}") from None
        _refuse_newer(version, newest, where)
        raise NetspecError(f"{where}: not a {what}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise NetspecError(f"{where}: not a JSON object ({exc})") from None
    _refuse_newer(record.format, newest, where)  # type: ignore[attr-defined]
    return record


def _format(data: bytes, where: str, what: str) -> int | None:
    try:
        return msgspec.json.decode(data, type=_Format).format
    except msgspec.ValidationError as exc:
        raise NetspecError(f"{where}: not a {what}: {exc}") from None


def _refuse_newer(version: int, newest: int, where: str) -> None:
    if version > newest:
        raise NetspecError(f"{where} has format {version}; this netspec reads up to {newest}: "
                           "upgrade netspec")
