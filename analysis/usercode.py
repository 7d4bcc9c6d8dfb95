"""A function of the user's own, named `module:function` or `file.py:function` (a file
relative to a base directory): analysis filters and event decoders. Loading one runs its
code, so only names the user gave (the experiment file, the command line) come here, never
a name read from a stream."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netspec.protocol.errors import NetspecError


class UserCodeError(NetspecError):
    """A user's function cannot be loaded: the message says which and why."""


def load_function(spec: str, base: Path, what: str) -> Callable[..., Any]:
    """The function `spec` names; `what` (filter, decoder) is how errors name it.

    Raises:
        UserCodeError: not module:function, its module not found or not loadable, or no such
            function in it.
    """
    where, sep, function = spec.rpartition(":")
    if not sep or not where or not function:
        raise UserCodeError(f"{what} {spec!r} is not module:function or file.py:function")
    try:
        if where.endswith(".py"):
            path = (base / where).resolve()
            loader = importlib.util.spec_from_file_location(f"netspec_{what}_{path.stem}", path)
            if loader is None or not path.is_file():
                raise UserCodeError(f"{what} module {where} not found (looked at {path})")
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            module = importlib.import_module(where)
    except (ImportError, SyntaxError) as exc:
        raise UserCodeError(f"cannot load {what} module {where}: {exc}") from exc
    fn = getattr(module, function, None)
    if not callable(fn):
        raise UserCodeError(f"{where} has no function {function}")
    return fn
