"""The scrape's lean HTTP/1.1 client (gpuscope/collector/scraping/http1.py) against raw
servers on loopback: every answer a target may give is handled as aiohttp handled it."""

from __future__ import annotations

import asyncio
import base64
import gzip
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from gpuscope.collector.scraping.fetch import Client, ScrapeError, fetch_page
from gpuscope.collector.scraping.http1 import MAX_HEAD
from gpuscope.collector.scraping.outcome import Target
from gpuscope.collector.scraping.scrape import Scraper

pytestmark = pytest.mark.integration
PAGE = b'up_ratio{gpu="0"} 1\nup_ratio{gpu="1"} 0.5\n'
#: (request head, connection number) -> the bytes to answer, or None to hang up.
Answer = Callable[[bytes, int], bytes | None]
#: At the end of an answer: hang up once it is sent.
HANG_UP = b"<hang up>"


def ok(body: bytes, *headers: str) -> bytes:
    head = ["HTTP/1.1 200 OK", "Content-Type: text/plain; version=0.0.4", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@contextmanager
def raw_server(answer: Answer) -> Iterator[tuple[str, list[bytes], list[int]]]:
    """A loopback server answering each request head with ``answer``; yields its URL, the
    request heads it got, and per connection the requests it served."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    heads: list[bytes] = []
    per_conn: list[int] = []
    stop = threading.Event()

    def serve(conn: socket.socket, n: int) -> None:
        buf = b""
        with conn:
            while not stop.is_set():
                while b"\r\n\r\n" not in buf:
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                heads.append(head)
                per_conn[n] += 1
                out = answer(head, n)
                if out is None:
                    return
                try:
                    conn.sendall(out.removesuffix(HANG_UP))
                except OSError:
                    return
                if out.endswith(HANG_UP):
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            per_conn.append(0)
            threading.Thread(target=serve, args=(conn, len(per_conn) - 1), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/metrics", heads, per_conn
    finally:
        stop.set()
        sock.close()


def fetch_all(urls: list[str], max_bytes: int = 2**20) -> list[bytes | ScrapeError]:
    """Fetch ``urls`` one after the other with one client."""

    async def go() -> list[bytes | ScrapeError]:
        out: list[bytes | ScrapeError] = []
        async with Client(4, {"Accept": "text/plain"}) as client:
            for url in urls:
                try:
                    out.append(await fetch_page(client, url, max_bytes))
                except ScrapeError as exc:
                    out.append(exc)
        return out

    return asyncio.run(go())


def test_connections_are_kept_alive_and_a_closed_idle_one_is_replaced() -> None:
    """Three pages on one connection; the server then closes it after its answer (as a
    keep-alive timeout does): the next scrape gets its page on a fresh connection."""

    def answer(head: bytes, n: int) -> bytes | None:
        return ok(PAGE)

    with raw_server(answer) as (url, _heads, per_conn):
        assert fetch_all([url] * 3) == [PAGE] * 3
        assert per_conn == [3]
    closes = [0]

    def closing(head: bytes, n: int) -> bytes | None:
        closes[0] += 1
        return ok(PAGE) if closes[0] % 2 else None  # every second request: hang up

    with raw_server(closing) as (url, _heads, per_conn):
        assert fetch_all([url] * 3) == [PAGE] * 3
        assert len(per_conn) >= 2  # the hung-up connection was replaced


def test_gzip_chunked_and_read_to_close_bodies() -> None:
    packed = gzip.compress(PAGE)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (packed[:7], packed[7:])) + (
        b"0\r\nX-Trailer: 1\r\n\r\n"
    )
    answers = [
        ok(packed, "Content-Encoding: gzip"),
        ok(chunked, "Content-Encoding: gzip", "Transfer-Encoding: chunked"),
        b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + PAGE + HANG_UP,
    ]

    def answer(head: bytes, n: int) -> bytes | None:
        assert b"Accept-Encoding: gzip, deflate" in head
        return answers.pop(0)

    with raw_server(answer) as (url, _heads, per_conn):
        assert fetch_all([url] * 3) == [PAGE] * 3
        assert per_conn == [3]  # the HTTP/1.0 answer was read to its connection's end


def test_a_chunk_size_that_is_not_hex_digits_is_refused() -> None:
    """A chunk size is 1*HEXDIG (RFC 9112): Python's int(..., 16) would also read "0x5",
    "+5" or "1_0" (and then the wrong number of bytes as the page); each is an HTTP
    failure. A size with a chunk extension and one in capitals are read."""
    body = b"x" * 16

    def framed(size: bytes) -> bytes:
        return ok(size + b"\r\n" + body + b"\r\n0\r\n\r\n", "Transfer-Encoding: chunked")

    answers = [framed(s) for s in (b"0x10", b"+10", b"1_0", b"", b" -10")]
    answers += [
        framed(b"10;name=value"),
        framed(b"0000010"),
        ok(
            b"A\r\n" + body[:10] + b"\r\n6\r\n" + body[:6] + b"\r\n0\r\n\r\n",
            "Transfer-Encoding: chunked",
        ),
    ]

    def answer(head: bytes, n: int) -> bytes | None:
        return answers.pop(0)

    with raw_server(answer) as (url, _heads, _per_conn):
        got = fetch_all([url] * 8)
    refused = got[:5]
    assert all(isinstance(e, ScrapeError) and e.reason == "http" for e in refused), got
    assert all("malformed chunk size" in str(e) for e in refused)
    assert got[5:] == [body, body, body]


def test_refusals_are_scrape_errors_with_their_reasons() -> None:
    bomb = gzip.compress(b"0" * 4 * 2**20)
    answers = [
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nhi",
        ok(bomb, "Content-Encoding: gzip"),
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + PAGE + HANG_UP,
        b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"a" * MAX_HEAD + b"\r\n\r\n",
        b"HTTP/1.1 2xx OK\r\n\r\n",
        ok(PAGE, "Content-Encoding: br"),
    ]

    def answer(head: bytes, n: int) -> bytes | None:
        return answers.pop(0)

    with raw_server(answer) as (url, _heads, _per_conn):
        got = fetch_all([url] * 7, max_bytes=2**20)
    reasons = [(e.reason, str(e)) for e in got if isinstance(e, ScrapeError)]
    assert [r for r, _ in reasons] == [
        "http", "page", "body_size_limit", "http", "http", "http", "http"
    ]  # fmt: skip
    assert reasons[0][1] == "HTTP 404"
    assert "mid-body" in reasons[3][1] and "head larger" in reasons[4][1]


def test_credentials_in_the_url_are_sent_as_basic_auth() -> None:
    def answer(head: bytes, n: int) -> bytes | None:
        want = b"Authorization: Basic " + base64.b64encode(b"scraper:pw@x")
        return ok(PAGE) if want in head else b"HTTP/1.1 401 No\r\nContent-Length: 0\r\n\r\n"

    with raw_server(answer) as (url, heads, _per_conn):
        secret = url.replace("http://", "http://scraper:pw%40x@")
        assert fetch_all([secret]) == [PAGE]
        assert heads[0].startswith(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:")


def test_a_redirect_is_followed_and_a_refused_connection_is_reason_connect() -> None:
    with raw_server(lambda head, n: ok(PAGE)) as (there, _, _):

        def answer(head: bytes, n: int) -> bytes | None:
            return f"HTTP/1.1 302 Found\r\nLocation: {there}\r\nContent-Length: 0\r\n\r\n".encode()

        with raw_server(answer) as (here, heads, _):
            assert fetch_all([here, here]) == [PAGE, PAGE]
            assert len(heads) == 3  # the first scrape asked twice, aiohttp then followed
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    (outcome,) = Scraper(timeout_seconds=5).scrape([Target(f"http://127.0.0.1:{port}/metrics")])
    assert not outcome.up and outcome.reason == "connect"
    assert outcome.error.startswith("cannot connect: ")


def test_a_body_that_never_ends_is_cut_by_the_timeout_and_its_connection_closed() -> None:
    def answer(head: bytes, n: int) -> bytes | None:
        if n == 0:
            return b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nup 1\n"  # and no more
        return ok(PAGE)

    with raw_server(answer) as (url, _heads, per_conn):
        scraper = Scraper(timeout_seconds=0.5)
        target = Target(url)

        async def go() -> tuple[bool, bool]:
            async with scraper.client() as client:
                first = await scraper.scrape_one(client, target)
                second = await scraper.scrape_one(client, target)
            return first.up or first.reason != "timeout", second.up

        assert asyncio.run(go()) == (False, True)
        assert len(per_conn) == 2  # the hanging connection was not reused


def test_idle_connections_of_targets_gone_are_closed() -> None:
    """The scrape loop tells the client its targets at every refresh: a connection kept
    for a target no longer scraped is closed, and so is one its server closed."""
    with (
        raw_server(lambda h, n: ok(PAGE)) as (a, _, _),
        raw_server(lambda h, n: ok(PAGE)) as (
            b,
            _,
            _,
        ),
    ):

        async def go() -> tuple[int, int, bool]:
            async with Client(4, {}) as client:
                assert [await fetch_page(client, u, 2**20) for u in (a, b)] == [PAGE, PAGE]
                idle = client.lean._idle
                before = len(idle)
                (conn_b,) = idle[("127.0.0.1", int(b.split(":")[2].split("/")[0]))]
                client.keep([a])
                after = len(idle)
                (conn_a,) = next(iter(idle.values()))
                conn_a.close()  # as if its server had hung up
                client.keep([a])
                return before, after, conn_b.done and not idle

        assert asyncio.run(go()) == (2, 1, True)
