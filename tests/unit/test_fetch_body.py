"""A page's body as fetch.py takes it in: held and inflated in one call when it cannot
pass the size limit, else inflated as it arrives; both give the same page or refusal."""

from __future__ import annotations

import gzip
import zlib

import pytest

from gpuscope.collector.scraping.fetch import MAX_RATIO, ScrapeError, _Body

PAGE = b"".join(b'up_ratio{gpu="%d"} 0.%d\n' % (i, i) for i in range(2000))


def read(pieces: list[bytes], encoding: str, max_bytes: int, hint: int = 0) -> bytes:
    body = _Body(max_bytes, hint)
    body.check(200, {"content-type": "text/plain", "content-encoding": encoding})
    for p in pieces:
        body.feed(p)
    return body.page()


def streamed(data: bytes, wbits: int) -> bytes:
    d = zlib.decompressobj(wbits)
    return d.decompress(data) + d.flush()


def split(data: bytes, n: int) -> list[bytes]:
    return [data[i : i + n] for i in range(0, len(data), n)] or [b""]


@pytest.mark.parametrize(
    ("data", "encoding", "wbits"),
    [
        (gzip.compress(PAGE), "gzip", 31),
        (zlib.compress(PAGE), "deflate", 15),
        (gzip.compress(PAGE)[:-20], "gzip", 31),  # truncated: as far as it goes
        (gzip.compress(PAGE) + b"trailing", "gzip", 31),
        (gzip.compress(PAGE) + gzip.compress(b"more 1\n"), "x-gzip", 31),  # first member
    ],
)
def test_one_call_and_streaming_give_the_same_page(data: bytes, encoding: str, wbits: int) -> None:
    want = streamed(data, wbits)
    for size in (len(data), 1000, 7):
        assert read(split(data, size), encoding, 2**20) == want  # held, one call
        # a limit so low that the body is inflated as it arrives
        small = len(want) + 1
        assert read(split(data, size), encoding, small) == want
        assert read(split(data, size), encoding, 2**20, hint=len(want)) == want


def test_a_body_that_could_pass_the_limit_streams_and_a_bomb_stops_at_it() -> None:
    bomb = gzip.compress(b"\0" * 8 * 2**20)
    limit = 2**20
    assert len(bomb) * MAX_RATIO > limit
    body = _Body(limit)
    body.check(200, {"content-encoding": "gzip"})

    def take_all() -> None:
        for piece in split(bomb, 4096):
            body.feed(piece)
        body.page()

    with pytest.raises(ScrapeError) as err:
        take_all()
    assert err.value.reason == "body_size_limit"
    assert body.packed is None and body.size <= limit + 1  # stopped one byte past it
    # held for one call only where the ratio cannot reach the limit
    small = gzip.compress(b"\0" * 200_000)
    assert len(small) * MAX_RATIO <= limit
    held = _Body(limit)
    held.check(200, {"content-encoding": "gzip"})
    held.feed(small)
    assert held.packed == [small] and held.size == 0
    assert held.page() == b"\0" * 200_000
    with pytest.raises(ScrapeError) as err:
        read([small], "gzip", 199_999)  # streams (the limit is low) and stops
    assert err.value.reason == "body_size_limit"


def test_deflate_gives_no_more_than_the_ratio_allows() -> None:
    """The bound the one call relies on: the most compressible input stays under it."""
    for n in (10_000, 1_000_000, 8 * 2**20):
        for packed in (zlib.compress(b"\0" * n, 9), gzip.compress(b"a" * n, 9)):
            assert n <= len(packed) * MAX_RATIO


def test_refusals() -> None:
    body = _Body(100)
    with pytest.raises(ScrapeError, match="HTTP 404"):
        body.check(404, {})
    with pytest.raises(ScrapeError, match="not a Prometheus exposition"):
        body.check(200, {"content-type": "text/html; charset=utf-8"})
    with pytest.raises(ScrapeError, match="unsupported Content-Encoding"):
        body.check(200, {"content-encoding": "br"})
    with pytest.raises(ScrapeError) as err:
        read([b"x" * 60, b"y" * 60], "", 100)
    assert err.value.reason == "body_size_limit"
    with pytest.raises(ScrapeError, match="cannot inflate"):
        read([b"not gzip at all"], "gzip", 2**20)
