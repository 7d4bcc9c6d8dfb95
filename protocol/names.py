"""Names that become paths. Every name read from a file or the wire that netspec turns into
a path (a run id, a host, component or stream name, a file a daemon lists) passes here:
one rule, one place, and every path made from one stays under its root."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import ProtocolError

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")


def safe_name(value: Any, what: str) -> str:
    """`value` if it can be one path component: letters, digits, _ . - (not first . or -).

    Raises:
        ProtocolError: naming `what` and the value.
    """
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ProtocolError(f"{what} {value!r} is not a name netspec makes a path of "
                            "(letters, digits, '_', '.', '-'; not starting with '.' or '-')")
    return value


def as_name(text: str) -> str:
    """`text` made a safe name: what a user called a file, to list it under (a handed-back
    'my results.csv' is files/my_results.csv)."""
    return safe_name(re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip(".-")[:200] or "file", "file name")


def confined(root: Path, relative: Any, what: str) -> Path:
    """root / `relative` (a relative path of safe names), which stays under `root`.

    Raises:
        ProtocolError: `relative` is absolute, climbs out, or is not made of safe names.
    """
    if not isinstance(relative, str):
        raise ProtocolError(f"{what} {relative!r} is not a relative path")
    parts = PurePosixPath(relative).parts
    if not parts or PurePosixPath(relative).is_absolute():
        raise ProtocolError(f"{what} {relative!r} is not a relative path")
    for part in parts:
        safe_name(part, what)
    return root.joinpath(*parts)
