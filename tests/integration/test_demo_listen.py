"""`gpuscope demo --serve --listen HOST:PORT` (issue 24: the demo was fixed to port 8080).

The address is checked and bound before the simulation starts, so a mistake or a busy port
is one line at once, not after minutes of simulated history."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpuscope.cli.main import main


def test_a_busy_listen_address_is_one_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        code = main(["demo", "--serve", "--listen", address, "--out", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and f"cannot listen on {address}" in err
    assert not (tmp_path / "d" / "gpuscope.duckdb").exists()


def test_a_malformed_listen_address_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--serve", "--listen", "localhost", "--out", str(tmp_path / "d")]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--listen localhost: expected HOST:PORT" in err
