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
    """`data` as a `kind` (`what`, for people), of a format up to `newest`.

    Raises:
        NetspecError: naming `where`, when it is not JSON, not a `what` (a key of the wrong
            type, named with its place), or of a format newer than `newest`.
    """
    try:
        version = msgspec.json.decode(data, type=_Format).format
        if version is None:  # the first format: read as it says the first one is
            return msgspec.convert({**msgspec.json.decode(data), "format": 1}, kind)
        if version > newest:
            raise NetspecError(f"{where} has format {version}; this netspec reads up to {newest}: "
                               "upgrade netspec")
        return _decoder(kind).decode(data)
    except msgspec.ValidationError as exc:
        raise NetspecError(f"{where}: not a {what}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise NetspecError(f"{where}: not a JSON object ({exc})") from None
