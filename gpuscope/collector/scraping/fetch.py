"""Fetch one target's page over HTTP, never holding more than the size limit in memory.

aiohttp, not httpx: at a thousand targets a cycle httpx cost ~1.6 ms of Python per request
(its connection pool scans every connection for every request, and httpcore retries a failed
``import sniffio`` each time), which alone used most of a cycle's budget; aiohttp's C parser
takes ~0.1 ms. Proxies from the environment are not used (as Prometheus scrapes).

The body is read as it comes and, when gzip- or deflate-encoded, inflated here with an
output cap on every step (``zlib``'s ``max_length``): a gzip bomb is stopped one byte past
the limit instead of being inflated a whole network chunk at a time (a 64 kB chunk of
zeroes inflates to 64 MB). Target URLs may carry credentials (``http://user:pw@host``);
:func:`redact_url` gives the form that every log line, label, status entry and table sees.
"""

from __future__ import annotations

import zlib

import aiohttp

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


def client_session(concurrency: int, headers: dict[str, str]) -> aiohttp.ClientSession:
    """The session :func:`fetch_page` takes: bodies as sent (inflated here, capped), no
    timeout of its own (the caller bounds each scrape), ``concurrency`` connections."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=None),
        headers=headers,
        auto_decompress=False,
    )


async def fetch_page(client: aiohttp.ClientSession, url: str, max_bytes: int) -> bytes:
    """The page at ``url``, inflated; raises :class:`ScrapeError` (or aiohttp's errors).

    Credentials in ``url`` (``http://user:pw@host``) are sent as basic auth."""
    headers = {"Accept-Encoding": "gzip, deflate"}
    async with client.get(url, headers=headers, allow_redirects=True) as resp:
        if resp.status != 200:
            raise ScrapeError(f"HTTP {resp.status}", "http")
        ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype in _REFUSED_TYPES:
            raise ScrapeError(f"answered {ctype}, not a Prometheus exposition", "page")
        inflate = _inflater(resp.headers.get("content-encoding", ""))
        too_big = ScrapeError(f"page larger than {max_bytes} bytes", "body_size_limit")
        # chunks joined once at the end: a growing buffer would be copied as it grows and
        # leave the heap fragmented (measured: 70 MB peak for a 16 MB page, 30 MB so)
        chunks: list[bytes] = []
        size = 0
        try:
            async for raw in resp.content.iter_any():
                if inflate is None:
                    size += len(raw)
                    if size > max_bytes:
                        raise too_big
                    chunks.append(raw)
                    continue
                data = raw
                while data:  # at most _STEP bytes out of zlib at a time
                    piece = inflate.decompress(data, min(_STEP, max_bytes + 1 - size))
                    size += len(piece)
                    if size > max_bytes:
                        raise too_big
                    chunks.append(piece)
                    data = inflate.unconsumed_tail
            if inflate is not None:
                chunks.append(inflate.flush())
                size += len(chunks[-1])
        except zlib.error as exc:
            raise ScrapeError(f"cannot inflate the page: {exc}", "page") from None
        if size > max_bytes:
            raise too_big
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
