"""A TCP proxy on loopback that the test controls: the link between the robot and the site server.

It sits between the daemon and the engine (the fake peer or a real vLLM) and does what a building's
network does on a bad day, on cue:

- `pass`: bytes flow both ways;
- `stall`: connections stay open (and new ones are accepted) but no byte moves either way until the
  link heals: a Wi-Fi dead spot, a congested switch;
- `drop`: every open connection is reset (RST) and each new one is accepted and reset at once: a
  link that keeps failing mid-answer;
- `refuse`: nothing listens on the port (connections are refused) and open connections are reset:
  the server's address gone.

`heal()` (= `set("pass")`) lets held bytes through and listens again on the same port. It runs its
own event loop on a thread, so a test drives it with plain calls.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from typing import Optional

MODES = ("pass", "stall", "drop", "refuse")


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), as a dropped link looks to the other end."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class Proxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.mode = "pass"
        self.accepted = 0  # connections accepted since the start (a resting daemon opens none)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="test-proxy", daemon=True)
        self._server: Optional[asyncio.AbstractServer] = None
        self._flowing: Optional[asyncio.Event] = None
        self._writers: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> Proxy:
        self._thread.start()
        self._call(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def set(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"proxy mode {mode!r}: one of {', '.join(MODES)}")
        self._call(self._set(mode))

    def heal(self) -> None:
        self.set("pass")

    def _call(self, coro) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        await self._listen()

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)

    async def _set(self, mode: str) -> None:
        self.mode = mode
        if mode in ("drop", "refuse"):
            for w in list(self._writers):
                _reset(w)
            self._writers.clear()
        if mode == "refuse" and self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        elif mode != "refuse":
            await self._listen()
        if mode == "stall":
            self._flowing.clear()
        else:
            self._flowing.set()

    async def _shutdown(self) -> None:
        for w in list(self._writers):
            _reset(w)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode in ("drop", "refuse"):
            return _reset(writer)
        self._writers.add(writer)
        await self._flowing.wait()  # a stalled link: accepted, and then nothing
        if writer not in self._writers:  # reset while it waited
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            self._writers.discard(writer)
            return _reset(writer)
        self._writers.add(up_writer)
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        self._writers.discard(writer)
        self._writers.discard(up_writer)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self._flowing.wait()  # held while the link stalls
                data = await reader.read(65536)
                await self._flowing.wait()
                if not data or writer not in self._writers:
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if writer in self._writers:
                try:
                    writer.close()
                except OSError:
                    pass
