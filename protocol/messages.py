"""Message types of the control protocol and the shape errors take on the wire.

Controller -> daemon requests carry an "id"; the daemon answers each with a "reply" or an
"error" of the same id. "enter" is one-way (no id): its answer is one "ack" per component,
or an "error" event. Events ("output", "exit", "ack") flow daemon -> controller unasked.
Daemon <-> component messages use the same framing over the inherited socketpair.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

TYPE_CHECKING = False  # typing's own flag, without importing typing: a program's start (nodelib's imports)
if TYPE_CHECKING:
    from typing import Any

# Version history:
#   1: first protocol (hello, setup, enter, reset, files, read, clock, shutdown).
#   2: frames sealed after the handshake (a MAC with a counted sequence); signed clksync probes.
#   3: fan-out trees: tree, join, acks; enter with hosts.
#   4: summarized acks: enter's summarize, the summary of acks.
#   5: a first-level host deflates its summary's records (zlib); a tree's enter has lists and
#      hosts by index; the controller checks every event.
#   6: frames tagged with keyed BLAKE2b instead of HMAC-SHA256.
#   7: clksync's probes tagged with keyed BLAKE2b too (probe version 3); the probe server
#      asks the kernel for its reply's TX stamp alone.
#   8: setup's join_token and share, join's host and token: a run is joined only with its
#      token as the host it is; a daemon holding another controller's run refuses a setup
#      unless it says share.
#   9: links (a run's link conditions on a host: checked at launch, changed at a step's
#      release) and fault (a scheduled fault) requests, the fault_done event, an exit's
#      and an ack's `scheduled`.
#  10: claim (component -> daemon: a role claimed or let go) and the claimed event (daemon ->
#      controller), for faults aimed at a role; setup's packets (the packets: service).
PROTOCOL_VERSION = 10


@cache
def netspec_version() -> str:
    """This netspec's version, as installed ("unknown" when run from a bare tree). Found
    once: the search reads every installed distribution's metadata, and importing its
    module alone (email's parsers with it) would be a third of a component's start."""
    from importlib import metadata

    try:
        return metadata.version("netspec")
    except metadata.PackageNotFoundError:
        return "unknown"


# The environment variable naming the socketpair fd a component talks to its daemon on.
FD_ENV = "NETSPEC_FD"
RUN_ENV = "NETSPEC_RUN"
COMPONENT_ENV = "NETSPEC_COMPONENT"
HOST_ENV = "NETSPEC_HOST"  # the experiment file's name of the host a component runs on
PARAMS_ENV = "NETSPEC_PARAMS"
# The address other hosts reach this host at (the one the controller's SSH connection
# came in on; 127.0.0.1 for local daemons).
HOST_ADDRESS_ENV = "NETSPEC_HOST_ADDRESS"
# A plain command's streams (JSON, as start_logging would hand them to an aware one).
LOGGING_ENV = "NETSPEC_LOGGING"

# What netspec creates (run directories, streams, outputs) is private to its owner.
PRIVATE_UMASK = 0o077

# Controller -> daemon requests.
READ_LIMIT = 4 * 1024 * 1024  # the most one read request is answered with
HELLO, SETUP, ENTER, END, RESET, FILES, READ, CLKSYNC, SHUTDOWN, TREE = (
    "hello", "setup", "enter", "end", "reset", "files", "read", "clksync", "shutdown", "tree")
# Daemon -> daemon: a parent in a fan-out tree attaches its connection to the run.
JOIN = "join"
# Controller -> daemon: a run's link conditions toward other hosts (netspec.links).
LINKS = "links"
# Controller -> daemon (`ns_control collect`): what this daemon, at its start, ended of a run
# whose daemon had died here (daemon/leftovers.py).
LEFT = "left"
# Daemon -> controller (ACKS: a batch of a fan-out tree's acks, each with its host).
REPLY, ERROR, OUTPUT, EXIT, ACK, ACKS = "reply", "error", "output", "exit", "ack", "acks"
# Component <-> daemon.
REGISTER, WELCOME, STOP = "register", "welcome", "stop"

# Component -> daemon: a role claimed (`held`) or let go, e.g. "leader" (nodelib.claim); a
# fault may be aimed at the component holding it (controller/engine/faults.py).
CLAIM = "claim"
ROLE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
MAX_ROLE = 64
ROLE_PATTERN = "^[A-Za-z0-9_.-]+$"  # ROLE_CHARS as a pattern, for the Claimed event's check

ACK_OK, ACK_WARNING, ACK_ERROR = "ok", "warning", "error"

# Built-in steps that reach into every NETSPEC-aware component, whether or not it
# registered a callback for them: nodelib opens and closes its streams there.
START_LOGGING, STOP_LOGGING = "start_logging", "stop_logging"
# The node-wide step in which every daemon waits for its clock bound (netspec.clksync).
SYNC_CLOCKS = "sync_clocks"


def is_role(name: object) -> bool:
    """Whether `name` is a role's name: 1 to MAX_ROLE letters, digits, '_', '-' or '.'."""
    return isinstance(name, str) and 0 < len(name) <= MAX_ROLE and set(name) <= ROLE_CHARS


def worst_status(statuses: Iterable[str]) -> str:
    """error over warning over ok; ok when there is none."""
    seen = set(statuses)
    return next((s for s in (ACK_ERROR, ACK_WARNING) if s in seen), ACK_OK)

# The participant name of a daemon itself in node-wide steps; no component may take it.
NODE = "netspecd"


ERROR_TEXT_LIMIT = 64 * 1024


def error_map(exc: BaseException, **context: Any) -> dict[str, Any]:
    """An exception as a plain map that can cross the wire (never pickled); its message and
    traceback keep their last ERROR_TEXT_LIMIT characters, so that it always fits a frame."""
    import traceback  # only where an error is said: a component's start does without it

    return {
        "type": type(exc).__name__,
        "message": _tail(str(exc)),
        "traceback": _tail("".join(traceback.format_exception(exc))),
        **context,
    }


def _tail(text: str) -> str:
    if len(text) <= ERROR_TEXT_LIMIT:
        return text
    return f"[{len(text) - ERROR_TEXT_LIMIT} characters cut]...{text[-ERROR_TEXT_LIMIT:]}"
