"""uvicorn's HTTP/1.1 protocol, with each answer's head and body in one write.

uvicorn (h11) writes an answer as two writes: the status line and headers, then the body.
Each becomes its own TCP segment; with Nagle's algorithm on, the second waited for the
client's delayed ACK (~40 ms per answer on a reused connection). The listening socket now
sets TCP_NODELAY (gpuscope/collector/service.py), and this protocol also joins the head to
the body that follows it, so a small answer is one segment and one syscall. A ``1xx``
head (``100 Continue``) is sent at once: the client waits for it before sending its body.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.h11_impl import H11Protocol


class HeadWithBody:
    """A transport that holds a response head until the next write, and sends both as one."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._head = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        chunk = bytes(data)
        if not self._head and chunk.startswith(b"HTTP/") and chunk[9:10] != b"1":
            self._head = chunk  # a final status line and headers: wait for the body
            return
        chunk, self._head = self._head + chunk, b""
        if chunk:
            self._transport.write(chunk)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def flush(self) -> None:
        if self._head:
            head, self._head = self._head, b""
            self._transport.write(head)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteH11Protocol(H11Protocol):
    """uvicorn's h11 protocol over :class:`HeadWithBody`."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(HeadWithBody(cast(asyncio.Transport, transport)))  # type: ignore[arg-type]
