"""tests/unit holds fast, pure tests: no module of it starts a process or a server, or opens
a socket. Tests that do (a fresh interpreter, the CLI, a loopback HTTP server, git) live in
tests/integration, as pyproject's ``integration`` marker says ("starts real processes or
servers on loopback"). Checked from each module's imports, so a new one cannot slip in."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parent
#: What starts a process or a server, or talks over a socket: the standard library's modules
#: and the suite's own loopback servers (the fake API server, the fake JupyterHub).
FORBIDDEN = frozenset({
    "subprocess",
    "multiprocessing",
    "socket",
    "socketserver",
    "http.server",
    "asyncio.subprocess",
    "tests.fakes.kube_api",
    "tests.fakes.jupyterhub_api",
})  # fmt: skip


def imported(source: str) -> set[str]:
    """Every module ``source`` imports, ``from a import b`` counted as ``a`` and ``a.b``
    (``b`` may be a module: ``from http import server``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def forbidden(source: str) -> list[str]:
    return sorted(
        name
        for name in imported(source)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    )


def test_the_check_sees_each_way_of_importing() -> None:
    assert forbidden("import subprocess as sp\n") == ["subprocess"]
    assert forbidden("from http import server\n") == ["http.server"]
    assert forbidden("from tests.fakes import kube_api\n") == ["tests.fakes.kube_api"]
    assert forbidden("def f():\n    from socket import socket\n") == ["socket", "socket.socket"]
    assert forbidden("import http.client\nfrom tests.fakes import kube_store\n") == []


def test_no_unit_test_starts_a_process_or_a_server() -> None:
    found = {
        path.name: names
        for path in sorted(UNIT.glob("*.py"))
        if (names := forbidden(path.read_text(encoding="utf-8")))
    }
    assert not found, f"move these to tests/integration: {found}"
