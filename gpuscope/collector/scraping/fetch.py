"""Fetch one target's page over HTTP, never holding more than the size limit in memory.

A plain-http page is fetched by gpuscope/collector/scraping/http1.py's lean keep-alive
client (aiohttp's request machinery cost more CPU than the page's parse, issue 39); an https
page, and a target that answered a redirect, by aiohttp (not httpx: at a thousand targets
a cycle httpx cost ~1.6 ms of Python per request). Proxies from the environment are not
used (as Prometheus scrapes).

The body is read as it comes and, when gzip- or deflate-encoded, inflated here with an
output cap on every step (``zlib``'s ``max_length``): a gzip bomb is stopped one byte past
the limit instead of being inflated a whole network chunk at a time (a 64 kB chunk of
zeroes inflates to 64 MB). Target URLs may carry credentials (``http://user:pw@host``);
:func:`redact_url` gives the form that every log line, label, status entry and table sees.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

import aiohttp

from gpuscope.collector.scraping.http1 import HttpFailure, LeanClient, Redirected

ACCEPT = "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.5"
_REFUSED_TYPES = ("text/html", "application/json", "application/xml")
#: Bytes inflated per zlib call: a gzip bomb never has more than this in one piece.
_STEP = 2**20


class ScrapeError(Exception):
    """Why a target gave no usable page (one line); ``reason`` is a short label value."""

    def __init__(self, message: str, reason: str = "page") -> None:
        super().__init__(message)
        self.reason = reason


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``xxxxx`` (as Go's ``URL.Redacted``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:xxxxx@{host}{slash}{path}"


def _inflater(encoding: str) -> zlib._Decompress | None:
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return None
    if enc in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if enc == "deflate":
        return zlib.decompressobj()
    raise ScrapeError(f"unsupported Content-Encoding {encoding!r}", "http")


class _Body:
    """A page's body as it arrives: inflated when encoded, refused past ``max_bytes``."""

    __slots__ = ("chunks", "inflate", "max_bytes", "size")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.inflate: zlib._Decompress | None = None
        # chunks joined once at the end: a growing buffer would be copied as it grows and
        # leave the heap fragmented (measured: 70 MB peak for a 16 MB page, 30 MB so)
        self.chunks: list[bytes] = []
        self.size = 0

    def check(self, status: int, headers: Mapping[str, str]) -> None:
        """Refuse an answer that is no page (headers by lower-case name); set up inflation."""
        if status != 200:
            raise ScrapeError(f"HTTP {status}", "http")
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype in _REFUSED_TYPES:
            raise ScrapeError(f"answered {ctype}, not a Prometheus exposition", "page")
        self.inflate = _inflater(headers.get("content-encoding", ""))

    def too_big(self) -> ScrapeError:
        return ScrapeError(f"page larger than {self.max_bytes} bytes", "body_size_limit")

    def feed(self, raw: bytes) -> None:
        inflate, max_bytes = self.inflate, self.max_bytes
        if inflate is None:
            self.size += len(raw)
            if self.size > max_bytes:
                raise self.too_big()
            self.chunks.append(raw)
            return
        data = raw
        try:
            while data:  # at most _STEP bytes out of zlib at a time
                piece = inflate.decompress(data, min(_STEP, max_bytes + 1 - self.size))
                self.size += len(piece)
                if self.size > max_bytes:
                    raise self.too_big()
                self.chunks.append(piece)
                data = inflate.unconsumed_tail
        except zlib.error as exc:
            raise ScrapeError(f"cannot inflate the page: {exc}", "page") from None

    def page(self) -> bytes:
        if self.inflate is not None:
            try:
                self.chunks.append(self.inflate.flush())
            except zlib.error as exc:
                raise ScrapeError(f"cannot inflate the page: {exc}", "page") from None
            self.size += len(self.chunks[-1])
        if self.size > self.max_bytes:
            raise self.too_big()
        chunks = self.chunks
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class Client:
    """The HTTP client :func:`fetch_page` takes (one per event loop, opened inside it): a
    plain-http page through :class:`~gpuscope.collector.scraping.http1.LeanClient`, any
    other (https, a target that redirects) through an aiohttp session opened when first
    needed. No timeout of its own (the caller bounds each scrape); ``concurrency``
    requests in flight at most on each path."""

    def __init__(self, concurrency: int, headers: dict[str, str]) -> None:
        self.concurrency = concurrency
        self.headers = {**headers, "Accept-Encoding": "gzip, deflate"}
        self.lean = LeanClient(concurrency, self.headers)
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = client_session(self.concurrency, self.headers)
        return self._session

    def keep(self, urls: Iterable[str]) -> None:
        """Drop what the client holds for URLs not in ``urls`` (idle connections among it)."""
        self.lean.keep(urls)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.lean.close()
        if self._session is not None:
            await self._session.close()


def client_session(concurrency: int, headers: dict[str, str]) -> aiohttp.ClientSession:
    """The aiohttp session of :class:`Client`: bodies as sent (inflated here, capped), no
    timeout of its own, ``concurrency`` connections."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=None),
        headers=headers,
        auto_decompress=False,
    )


async def fetch_page(client: Client, url: str, max_bytes: int) -> bytes:
    """The page at ``url``, inflated; raises :class:`ScrapeError` (or aiohttp's errors).

    Credentials in ``url`` (``http://user:pw@host``) are sent as basic auth."""
    body = _Body(max_bytes)
    lean = client.lean
    r = lean.route(url)
    if r is not None:
        try:
            await lean.get(r, lambda head: body.check(head.status, head.headers), body.feed)
            return body.page()
        except HttpFailure as exc:
            raise ScrapeError(str(exc), exc.reason) from None
        except Redirected:  # aiohttp follows redirects (bounded), this time and after
            lean.redirecting.add(url)
            lean.forget(url)
            body = _Body(max_bytes)
    async with client.session().get(url, allow_redirects=True) as resp:
        body.check(resp.status, resp.headers)
        async for raw in resp.content.iter_any():
            body.feed(raw)
    return body.page()
