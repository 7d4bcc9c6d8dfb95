"""A controller's view of one real daemon, for the daemon's tests: requests, and every event
that arrived, each as the map it was on the wire (decoded by the controller's own reading,
protocol/kinds.py, and said back as the map it is)."""

import asyncio

from netspec.controller.hosts.fleet import DaemonClient, Lost
from support import on_the_wire


class Session:
    """One connection to a daemon: requests plus every event that arrived."""

    def __init__(self, port: int, key: bytes):
        self.port, self.key = port, key
        self.events: list[dict] = []
        self.arrived = asyncio.Event()

    def on_event(self, host: str, event) -> None:
        self.events.append({"t": "lost", "error": event.error} if isinstance(event, Lost)
                           else on_the_wire(event))
        self.arrived.set()

    async def __aenter__(self):
        self.client = await DaemonClient.connect("t", ("127.0.0.1", self.port), self.key,
                                                 self.on_event)
        self.serving = asyncio.create_task(self.client.serve())
        return self

    async def __aexit__(self, *exc):
        await self.client.close()
        await self.serving

    async def request(self, kind: str, **fields):
        reply = await self.client.request(kind, asyncio.get_running_loop().time() + 20, **fields)
        return on_the_wire(reply)

    async def event(self, kind: str, component: str | None = None, step: int | None = None) -> dict:
        """The first event of `kind` (of `component`, of `step`), waited for up to 20 s."""
        async with asyncio.timeout(20):
            while True:
                for e in self.events:
                    if e["t"] == kind and (component is None or e.get("component") == component) \
                            and (step is None or e.get("step") == step):
                        return e
                self.arrived.clear()
                await self.arrived.wait()
