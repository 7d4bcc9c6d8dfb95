"""The one error tree of netspec: every failure a user can meet is a NetspecError.

Each error keeps its context (file and line, host, phase, component) as attributes and its
message names that context, so the CLI can print a chain of causes that says who and where.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable, Mapping

TYPE_CHECKING = False  # typing's own flag, without importing typing: a program's start (nodelib's imports)
if TYPE_CHECKING:
    from typing import Any, Protocol

# Hosts named in one error's message; beyond, counted: an error shared by a thousand hosts
# stays a line.
NAMED_HOSTS = 8


def in_order(hosts: Iterable[str]) -> list[str]:
    """`hosts` in their natural order: h2 before h10."""
    return sorted(hosts, key=lambda h: [(0, int(p), "") if p.isdigit() else (1, 0, p)
                                        for p in re.split(r"(\d+)", h)])


def some_hosts(hosts: Iterable[str], named: int = NAMED_HOSTS) -> str:
    """`hosts` in their natural order, the first `named` by name and the rest counted:
    "a, b" or "h0, h1, h2 and 428 more"."""
    ordered = in_order(hosts)
    more = len(ordered) - named
    return ", ".join(ordered[:named]) + (f" and {more} more" if more > 0 else "")


class NetspecError(Exception):
    """Base of every error netspec raises on purpose."""


class ConfigError(NetspecError):
    """An experiment file is invalid: names the file, the line and the key."""

    def __init__(self, message: str, file: str = "", line: int | None = None, key: str = ""):
        self.file, self.line, self.key, self.reason = file, line, key, message
        where = file + (f":{line}" if line else "")
        parts = [p for p in (where, key) if p]
        super().__init__(": ".join([*parts, message]))


class ConfigErrors(ConfigError):
    """Every problem found in one experiment file, in line order; the first one's file, line
    and key are this error's own."""

    def __init__(self, errors: list[ConfigError]):
        self.errors = sorted(errors, key=lambda e: (e.line or 0, e.key))
        first = self.errors[0]
        super().__init__(first.reason, first.file, first.line, first.key)
        self.args = ("\n".join(str(e) for e in self.errors),)

    def __str__(self) -> str:
        return self.args[0]


class ProtocolError(NetspecError):
    """A peer sent bytes that are not a valid frame or message."""

    def __init__(self, message: str, peer: str = ""):
        self.peer = peer
        super().__init__(f"{peer}: {message}" if peer else message)


class AuthError(ProtocolError):
    """A peer failed the challenge-response handshake."""


class HandshakeDropped(AuthError):
    """The daemon hung up in the handshake without refusing it: one with too many
    connections in their handshake drops the oldest for a newcomer. Worth trying again,
    unlike a refusal (a key it does not share, a protocol it does not speak, no room)."""


class ConnectionLost(NetspecError):
    """A daemon or component connection closed while it was still needed."""

    def __init__(self, host: str, phase: str = "", detail: str = ""):
        self.host, self.phase, self.detail = host, phase, detail
        where = f"phase '{phase}', host {host}" if phase else f"host {host}"
        super().__init__(f"{where}: connection lost" + (f" ({detail})" if detail else ""))


if TYPE_CHECKING:
    class SaidError(Protocol):
        """An error that crossed the wire, as kinds.py's `WireError` carries it (named by what
        it says, so that this module, which every other imports, imports none of them)."""

        type: str
        message: str


class RemoteError(NetspecError):
    """A request failed on the daemon; carries the error that crossed the wire
    (kinds.WireError)."""

    def __init__(self, host: str, error: SaidError):
        self.host = host
        self.error = error
        # Python's own errors (an OSError, a KeyError) say what failed, not what netspecd was
        # doing: where it was, the last frame of the traceback that crossed with it, is said too.
        said_by = getattr(builtins, error.type, None)
        builtin = isinstance(said_by, type) and issubclass(said_by, Exception)
        where = _last_frame(getattr(error, "traceback", "")) if builtin else ""
        super().__init__(f"host {host}: {error.type}: {error.message}{where}")


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)$', re.M)


def _last_frame(traceback: str) -> str:
    """The innermost frame of a traceback's text, as " (at netspec's PATH:LINE, in FUNCTION)",
    PATH from netspec's package on; "" if it has none."""
    frames = list(_FRAME.finditer(traceback))
    if not frames:
        return ""
    last = frames[-1]
    path = last["path"].replace("\\", "/")
    short = path.rsplit("/netspec/", 1)[-1] if "/netspec/" in path else path.rsplit("/", 1)[-1]
    return f" (at {short}:{last['line']}, in {last['function']})"


class DeadlineExceeded(NetspecError):
    """A wait that had to finish did not finish before its deadline."""

    def __init__(self, phase: str, waiting: Mapping[str, list[str]], seconds: float):
        self.phase, self.waiting, self.seconds = phase, dict(waiting), seconds
        hosts = in_order(waiting)
        who = "; ".join(f"host {h}: {', '.join(waiting[h])}" for h in hosts[:NAMED_HOSTS])
        if len(hosts) > NAMED_HOSTS:
            who += f" and {len(hosts) - NAMED_HOSTS} more hosts ({len(hosts)} in all)"
        super().__init__(f"phase '{phase}': deadline of {seconds:g} s passed, still waiting for {who}")


class ComponentFailed(NetspecError):
    """A component exited badly or acked a phase with an error; holds its whole result."""

    TRACEBACK_LINES = 8

    def __init__(self, result: Any, phase: str = "", reason: str = "", traceback: str = ""):
        self.result, self.phase, self.reason, self.traceback = result, phase, reason, traceback
        super().__init__(self._describe())

    def _describe(self) -> str:
        r = self.result
        head = f"phase '{self.phase}', host {r.host}: " if self.phase else f"host {r.host}: "
        what = self.reason or r.describe_exit()
        lines = [f"{head}component '{r.component}' {what}", f"  command: {r.command_line()}"]
        if self.traceback:
            shown = self.traceback.rstrip().splitlines()[-self.TRACEBACK_LINES:]
            lines.append("  its traceback (last lines; `ns_control show` has all):")
            lines.extend(f"  | {t}" for t in shown)
        for stream, tail in r.tail(10).items():  # each stream's apart: one cannot hide the other's
            lines.append(f"  last lines of {stream}:")
            lines.extend(f"  | {t}" for t in tail)
        return "\n".join(lines)


class StepFailed(NetspecError):
    """A step failed on one or more hosts; `results` maps each host to its result or error."""

    def __init__(self, phase: str, results: Mapping[str, Any]):
        self.phase, self.results = phase, dict(results)
        failed = [h for h, r in self.results.items() if isinstance(r, BaseException)]
        count = f" ({len(failed)} hosts)" if len(failed) > NAMED_HOSTS else ""
        super().__init__(f"phase '{phase}' failed on {some_hosts(failed) or 'no host'}{count}")

    @property
    def failed(self) -> dict[str, BaseException]:
        return {h: r for h, r in self.results.items() if isinstance(r, BaseException)}

    @property
    def succeeded(self) -> dict[str, Any]:
        return {h: r for h, r in self.results.items() if not isinstance(r, BaseException)}

    def causes(self, named: int = 3) -> list[str]:
        """Each cause once (`said_once`): a host that failed its own way, its whole error;
        hosts that failed alike, one line that counts them."""
        return said_once([(host, f"{type(error).__name__}: {shared_text(host, error)}", str(error))
                          for host, error in self.failed.items()], named)


def said_once(entries: Iterable[tuple[str, str, str]], named: int = 3) -> list[str]:
    """Each text once for the hosts it was said of alike, the most said first. `entries`
    are (host, what identifies the text alike: it without the host's own names, as
    `without_names` leaves it, the text). A host alone keeps its whole text; hosts alike
    get one line that counts them, names `named` of them and quotes the first one's text's
    first line."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for host, key, text in entries:
        groups.setdefault(key, []).append((host, text))
    said = []
    for members in sorted(groups.values(), key=lambda m: -len(m)):
        hosts = in_order(h for h, _ in members)
        first = dict(members)[hosts[0]]
        alike = f"on {len(hosts)} hosts ({some_hosts(hosts, named)}) alike: {first.partition(chr(10))[0]}"
        said.append(first if len(hosts) == 1 else alike)
    return said


def shared_text(host: str, error: BaseException) -> str:
    """What `error` of `host` says with the names that are that host's own taken out (its
    name, its component's, its address, a component's run time): the same text for hosts
    that failed alike, so that an error shared by hundreds of hosts is said once."""
    names = [host]
    if isinstance(error, ComponentFailed):
        names.append(error.result.component)
        what = error.reason or re.sub(r" after [0-9.]+ s$", "", error.result.describe_exit())
        return without_names(f"phase '{error.phase}': component {{name}} {what}", names)
    return without_names(str(error).partition("\n")[0], names)


def without_names(text: str, names: Iterable[str]) -> str:
    """`text` with each of `names` (a host's, its component's: whole words) and each
    address in it taken out."""
    alternatives = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    text = re.sub(rf"(?<![\w.-])(?:{alternatives})(?![\w.-])", "{name}", text)
    return ADDRESS.sub("{address}", text)


# An IPv4 address with its port, as netspec says it (1.2.3.4:5) and as Python's socket
# errors do ('1.2.3.4', 5).
ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+\b|', \d+\b)?")


class StreamError(NetspecError):
    """A datastream file cannot be read at all (not a stream, or a newer format)."""

    def __init__(self, file: str, message: str, chunk: int | None = None):
        self.file, self.chunk = file, chunk
        where = f"{file}, chunk {chunk}" if chunk is not None else file
        super().__init__(f"{where}: {message}")


class Interrupted(NetspecError):
    """The user interrupted the run (Ctrl-C or SIGTERM)."""


def raise_if_any_failed(phase: str, results: dict[str, Any]) -> None:
    """`results` maps each host to its result or exception (asyncio.gather's
    return_exceptions); any exception fails the step, naming every host."""
    errors = [r for r in results.values() if isinstance(r, BaseException)]
    for error in errors:
        if not isinstance(error, Exception):
            raise error  # cancellation is not a host's failure
    if errors:
        raise StepFailed(phase, results)
