"""nftables in this process: libnftables, the library the `nft` tool is made of, through
ctypes. A run's table changes in one transaction in 0.2-0.7 ms this way, where `nft -f -`
spends about 7 ms starting (measured in a namespaced host, a partition's cut: 8 ms by the
tool), which a fault due at an instant cannot spare, nor a partition's counter read every
few milliseconds. Where the library cannot be loaded, the tool is run as before.
"""

from __future__ import annotations

import ctypes
import functools
import threading

from .names import ToolFailed, run

LIBRARY = "libnftables.so.1"  # the nftables package's (Debian's libnftables1), beside its `nft`
_OUTPUT_JSON = 1 << 4  # NFT_CTX_OUTPUT_JSON


class _Context:
    """One nft context for the process, used under a lock: a context is not thread-safe,
    and the daemon changes and reads its run's table from several threads."""

    def __init__(self, lib: ctypes.CDLL):
        lib.nft_ctx_new.restype = ctypes.c_void_p
        lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
        for name in ("nft_ctx_buffer_output", "nft_ctx_buffer_error"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
        for name in ("nft_ctx_get_output_buffer", "nft_ctx_get_error_buffer"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
            getattr(lib, name).restype = ctypes.c_char_p
        lib.nft_ctx_output_set_flags.argtypes = [ctypes.c_void_p, ctypes.c_uint]
        lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        self.lib, self.lock = lib, threading.Lock()
        self.ctx = lib.nft_ctx_new(0)  # NFT_CTX_DEFAULT; lives as long as the process
        if not self.ctx:
            raise OSError("nft_ctx_new failed")
        lib.nft_ctx_buffer_output(self.ctx)
        lib.nft_ctx_buffer_error(self.ctx)

    def run(self, script: str, json: bool) -> str:
        with self.lock:
            self.lib.nft_ctx_output_set_flags(self.ctx, _OUTPUT_JSON if json else 0)
            failed = self.lib.nft_run_cmd_from_buffer(self.ctx, script.encode())
            out = (self.lib.nft_ctx_get_output_buffer(self.ctx) or b"").decode()
            err = (self.lib.nft_ctx_get_error_buffer(self.ctx) or b"").decode()
        if failed:
            raise ToolFailed(f"nft: {err.strip()[-400:] or 'failed'}")
        return out


@functools.cache
def load() -> _Context | None:
    """The process's context, made at the first call (a run's first change at an instant
    need not load the library: LinkSet.prepare calls this ahead); None: no library."""
    try:
        return _Context(ctypes.CDLL(LIBRARY))
    except (OSError, AttributeError):
        return None  # no library (or an old one): the tool


def nft(script: str, json: bool = False) -> str:
    """Run nft commands (one transaction, as `nft -f -`), JSON output if `json`; the output.

    Raises:
        ToolFailed: nft refused them (its error message), or the tool could not run.
    """
    context = load()
    if context is None:
        return run(["nft", *(["-j"] if json else []), "-f", "-"], stdin=script)
    return context.run(script, json)
