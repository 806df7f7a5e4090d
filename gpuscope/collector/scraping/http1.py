"""A lean HTTP/1.1 keep-alive GET for plain-http scrape targets, on asyncio's transports.

aiohttp's request path (session, request and response objects, header multidicts, cookie
jar, per-request timers, trace hooks, the connector's bookkeeping) cost more CPU than
parsing the page (issue 39; an agent's gzipped page fetched one after the other: ~480 us
of CPU a fetch with aiohttp, ~240 us here, inflating included). A scrape needs one
GET, so a plain ``http://`` page is fetched here: the request's bytes are built once per
URL, the response head is split in Python (a few short lines) and the body handed over as
it arrives, in pieces, to the caller's sink (gpuscope/collector/scraping/fetch.py caps and
inflates it). What this path does not do is left to aiohttp (:mod:`fetch`): ``https``
targets and any target that once answered a redirect (its first redirect is asked for
twice: here, then by aiohttp, which follows it). No cookies are kept (nor by Prometheus).

Kept from aiohttp's behaviour: basic auth from credentials in the URL, keep-alive
connections reused per host and port, one retry on a fresh connection when a reused one
turns out closed before any byte of the answer, Content-Length, chunked and read-to-close
bodies, at most ``concurrency`` requests in flight, a connect failure told apart
(``reason`` connect). A response head over :data:`MAX_HEAD` bytes, a malformed head or a
connection that ends mid-body fails the scrape (``reason`` http). Cancellation (the
caller's timeout) closes the connection.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import yarl

#: Bytes of a response's status line and headers at most (aiohttp allows 8 KB a line).
MAX_HEAD = 64 * 1024
#: Buffered bytes past which the connection stops reading until the body is consumed.
_HIGH_WATER = 4 * 2**20
_REDIRECTS = frozenset((301, 302, 303, 307, 308))


class HttpFailure(Exception):
    """One line; ``reason`` is ``connect`` or ``http``."""

    def __init__(self, message: str, reason: str = "http") -> None:
        super().__init__(message)
        self.reason = reason


class Redirected(Exception):
    """The target answered a redirect: its URL is for aiohttp, which follows them."""


@dataclass(frozen=True, slots=True)
class Head:
    status: int
    #: Header names lower-cased; repeated headers joined with ``", "``.
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class _Route:
    key: tuple[str, int]
    request: bytes


def route(url: str, headers: dict[str, str]) -> _Route | None:
    """What a GET of ``url`` sends where; None when this module does not fetch it (not
    plain http). Raises ValueError for a URL yarl refuses, as aiohttp would."""
    u = yarl.URL(url)
    if u.scheme != "http" or not u.raw_host:
        return None
    port = u.port or 80
    host = u.raw_host
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    hostport = host if u.explicit_port is None else f"{host}:{u.explicit_port}"
    lines = [f"GET {u.raw_path_qs or '/'} HTTP/1.1", f"Host: {hostport}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if u.user is not None or u.password is not None:
        cred = f"{u.user or ''}:{u.password or ''}".encode("latin-1")
        lines.append("Authorization: Basic " + base64.b64encode(cred).decode("ascii"))
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return _Route((u.raw_host, port), request)


class _Conn(asyncio.Protocol):
    """One connection: what it received, and a future to wake the reader on more."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.done = False  # the peer ended (EOF) or the connection was lost
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.done = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.done = True
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def more(self) -> None:
        """Wait for bytes past those in ``buf`` (or the end of the connection)."""
        if self.done:
            return
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def take(self, n: int = -1) -> bytes:
        """Up to ``n`` buffered bytes (all of them when ``n`` < 0), removed from ``buf``."""
        buf = self.buf
        if n < 0 or n >= len(buf):
            out = bytes(buf)
            buf.clear()
        else:
            out = bytes(buf[:n])
            del buf[:n]
        return out

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.done = True

    async def head(self) -> Head:
        """The next response's status and headers (1xx answers skipped)."""
        while True:
            start = 0
            while True:
                end = self.buf.find(b"\r\n\r\n", start)
                if end >= 0:
                    break
                if len(self.buf) > MAX_HEAD:
                    raise HttpFailure(f"response head larger than {MAX_HEAD} bytes")
                if self.done:
                    raise _Closed(bool(self.buf))
                start = max(0, len(self.buf) - 3)
                await self.more()
            if end > MAX_HEAD:
                raise HttpFailure(f"response head larger than {MAX_HEAD} bytes")
            raw = self.take(end + 4)[:end]
            head = _parse_head(raw)
            if not 100 <= head.status < 200:
                return head


class _Closed(Exception):
    """The connection ended before a whole response head; ``partial``: after some bytes."""

    def __init__(self, partial: bool) -> None:
        super().__init__("server closed the connection")
        self.partial = partial


def _parse_head(raw: bytes) -> Head:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HttpFailure(f"malformed response status line {lines[0][:80]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    if parts[0] == "HTTP/1.0":  # no keep-alive unless the server says so
        headers["connection"] = "close"
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpFailure(f"malformed response header {line[:80]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if parts[0] == "HTTP/1.0" and "keep-alive" in headers["connection"].lower():
        headers["connection"] = "keep-alive"
    return Head(status, headers)


Sink = Callable[[bytes], None]


class LeanClient:
    """Keep-alive connections per host and port, for :func:`get` of plain-http pages."""

    def __init__(self, concurrency: int, headers: dict[str, str]) -> None:
        self.headers = headers
        self._gate = asyncio.Semaphore(concurrency)
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._routes: dict[str, _Route | None] = {}
        #: URLs that answered a redirect: aiohttp fetches them from then on.
        self.redirecting: set[str] = set()

    def route(self, url: str) -> _Route | None:
        try:
            return self._routes[url]
        except KeyError:
            r = self._routes[url] = None if url in self.redirecting else route(url, self.headers)
            if len(self._routes) > 100_000:  # targets come and go: never grows unbounded
                self._routes.clear()
            return r

    def forget(self, url: str) -> None:
        self._routes.pop(url, None)

    def keep(self, urls: Iterable[str]) -> None:
        """Close the idle connections to hosts no URL of ``urls`` is on, and those the
        server has closed; forget what other URLs were (targets come and go)."""
        urls = set(urls)
        for url in [u for u in self._routes if u not in urls]:
            del self._routes[url]
        self.redirecting &= urls
        keys = {r.key for r in self._routes.values() if r is not None}
        for key, conns in list(self._idle.items()):
            for conn in conns:
                if key not in keys or conn.done:
                    conn.close()
            conns[:] = [c for c in conns if not c.done]
            if not conns:
                del self._idle[key]

    async def get(self, r: _Route, check: Callable[[Head], None], sink: Sink) -> None:
        """GET ``r``: ``check`` sees the head (raises to refuse it), ``sink`` every piece of
        the body in order. Raises :class:`HttpFailure` or :class:`Redirected`."""
        async with self._gate:
            idle = self._idle.get(r.key)
            while idle:
                conn = idle.pop()
                if not conn.done and not conn.buf:
                    try:
                        if await self._exchange(conn, r, check, sink):
                            return
                    except _Closed as exc:
                        if exc.partial:
                            raise HttpFailure("server closed the connection mid-response") from None
                        break  # closed while idle: once more on a fresh connection
                else:
                    conn.close()
            conn = await self._connect(r.key)
            try:
                await self._exchange(conn, r, check, sink)
            except _Closed:
                raise HttpFailure("server closed the connection before answering") from None

    async def _connect(self, key: tuple[str, int]) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(_Conn, key[0], key[1])
        except OSError as exc:
            raise HttpFailure(f"cannot connect: {exc}", "connect") from None
        return conn

    async def _exchange(self, conn: _Conn, r: _Route, check: Callable[[Head], None],
                        sink: Sink) -> bool:  # fmt: skip
        """One request and its response on ``conn``; True when it was read whole."""
        reusable = False
        try:
            assert conn.transport is not None
            conn.transport.write(r.request)
            head = await conn.head()
            if head.status in _REDIRECTS and "location" in head.headers:
                raise Redirected()
            check(head)
            reusable = await _body(conn, head, sink)
        finally:
            if reusable and not conn.done:
                self._idle.setdefault(r.key, []).append(conn)
            else:
                conn.close()
        return True

    def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()


async def _body(conn: _Conn, head: Head, sink: Sink) -> bool:
    """Hand the body to ``sink``; True when the connection may carry another request."""
    h = head.headers
    keep = "close" not in h.get("connection", "").lower()
    if head.status in (204, 304):
        return keep
    if "chunked" in h.get("transfer-encoding", "").lower():
        await _chunked(conn, sink)
        return keep
    length = h.get("content-length")
    if length is None:  # to the end of the connection
        while True:
            if conn.buf:
                sink(conn.take())
            if conn.done:
                _raise_lost(conn)
                return False
            await conn.more()
    if not length.strip().isdigit():
        raise HttpFailure(f"malformed Content-Length {length[:40]!r}")
    await _exactly(conn, int(length), sink)
    return keep


async def _exactly(conn: _Conn, left: int, sink: Sink) -> None:
    """Hand the next ``left`` bytes of the connection to ``sink`` (a sized body, a chunk)."""
    while left:
        if conn.buf:
            piece = conn.take(left)
            left -= len(piece)
            sink(piece)
            continue
        if conn.done:
            raise HttpFailure("server closed the connection mid-body")
        await conn.more()


def _raise_lost(conn: _Conn) -> None:
    if conn.error is not None:
        raise HttpFailure(f"connection lost: {conn.error}")


#: The bytes a chunk size is written in.
_HEXDIGITS = b"0123456789abcdefABCDEF"


async def _line(conn: _Conn) -> bytes:
    while (end := conn.buf.find(b"\r\n")) < 0:
        if len(conn.buf) > 4096:
            raise HttpFailure("malformed chunked body (a line over 4096 bytes)")
        if conn.done:
            raise HttpFailure("server closed the connection mid-body")
        await conn.more()
    return conn.take(end + 2)[:end]


async def _chunked(conn: _Conn, sink: Sink) -> None:
    while True:
        size_text = (await _line(conn)).split(b";", 1)[0].strip(b" \t")
        # RFC 9112: chunk-size = 1*HEXDIG. int(..., 16) alone would also take "0x10",
        # "+5" or "1_0", which are not HTTP: a body framed so is refused, not guessed at.
        if not size_text or size_text.strip(_HEXDIGITS) or len(size_text) > 16:
            raise HttpFailure(f"malformed chunk size {size_text[:20]!r}")
        size = int(size_text, 16)
        if size == 0:
            while await _line(conn):  # trailers, up to the empty line
                pass
            return
        await _exactly(conn, size, sink)
        if await _line(conn):
            raise HttpFailure("malformed chunked body (no CRLF after a chunk)")
