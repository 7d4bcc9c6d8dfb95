"""The process's own Datastreams (netspec.datastream.instrument), which nodelib's functions
use: the streams netspecd asks a component to open, and a plain command's, opened from its
environment when it declares its first entity."""

from __future__ import annotations

import os
from pathlib import Path

from netspec.datastream.instrument import Datastreams
from netspec.protocol import messages as m

TYPE_CHECKING = False  # typing's own flag, without importing typing: a program's start (nodelib's imports)
if TYPE_CHECKING:
    from typing import Any

    from netspec.datastream.writer import StreamConfig, StreamInfo


def streams_from(logging: dict[str, Any], component: str, run: str) -> tuple[list[StreamConfig], StreamInfo]:
    """The streams netspecd asks a component to open (at start_logging, or at start for a
    plain command): the writer is loaded here, with them."""
    from netspec.datastream.writer import StreamConfig, StreamInfo

    configs = [StreamConfig.from_map(n, d) for n, d in logging["streams"].items()]
    return configs, StreamInfo(Path(logging["dir"]), run=run, host=logging["host"], component=component)


class ProcessStreams(Datastreams):
    """The process's own entities and streams: what nodelib's functions and the phase loop
    use. A plain command that netspecd started with streams (NETSPEC_LOGGING set, no
    NETSPEC_FD) opens them when it declares its first entity and closes them when it exits:
    importing nodelib opens nothing."""

    def __init__(self) -> None:
        super().__init__()
        self._environment_read = False

    def _declare(self, cls: type[Any], group: str, name: str, desc: str, decoder: str | None,
                 spec: dict[str, Any]) -> Any:
        if not self._environment_read:
            self._environment_read = True
            if m.LOGGING_ENV in os.environ and m.FD_ENV not in os.environ:
                import json

                self.start(*streams_from(json.loads(os.environ[m.LOGGING_ENV]),
                                         os.environ.get(m.COMPONENT_ENV, ""), os.environ.get(m.RUN_ENV, "")))
        return super()._declare(cls, group, name, desc, decoder, spec)


default = ProcessStreams()
