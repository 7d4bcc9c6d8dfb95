"""A function of the user's own, named `module:function` or `file.py:function` (a file
relative to a base directory): analysis filters and event decoders. Loading one runs its
code, so only names the user gave (the experiment file they run, the command line) come
here, never a name read from a stream or from a run directory's record (a received run's
run.json is data, as a stream is)."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netspec.protocol.errors import NetspecError


class UserCodeError(NetspecError):
    """A user's function cannot be loaded: the message says which and why."""


@dataclass(frozen=True)
class UserCode:
    """The user's own functions a merge may run: those the user named, in the experiment file
    they run or on the command line, and where a `file.py:function` among them is found.
    What a run's record names and the user did not is not run, and the merge says so."""

    decoders: tuple[str, ...] = ()
    filters: tuple[str, ...] = ()
    base: Path = Path()

    def trusted_filters(self) -> frozenset[str]:
        """The filters named, a file's made absolute as the experiment file's loader does,
        to be found among an analysis graph's."""
        return frozenset(absolute(spec, self.base) for spec in self.filters)


NONE = UserCode()  # the user named none: a merge runs no code of the run's record


def split(spec: str) -> tuple[str, str]:
    """`module:function` or `file.py:function` as (module or file, function); ("", spec)
    without a colon (a built-in filter's name)."""
    where, _, function = spec.rpartition(":")
    return where, function


def absolute(spec: str, base: Path) -> str:
    """`spec` with a `file.py` part made an absolute path from `base`; a module's as it is."""
    where, function = split(spec)
    return f"{(base / where).resolve()}:{function}" if where.endswith(".py") else spec


def load_function(spec: str, base: Path, what: str) -> Callable[..., Any]:
    """The function `spec` names; `what` (filter, decoder) is how errors name it.

    Raises:
        UserCodeError: not module:function, its module not found or not loadable, or no such
            function in it.
    """
    where, function = split(spec)
    if not where or not function:
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
