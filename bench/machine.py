"""Which machine the figures were measured on: they mean nothing without it."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"') + f" (Linux {platform.release()})"
    except OSError:
        pass
    return platform.platform()


def tool_version(*names: str) -> str | None:
    """``X.Y.Z`` of the first of ``names`` on PATH (``--version``), or None if none is."""
    for name in names:
        path = shutil.which(name)
        if path is None:
            continue
        try:
            out = subprocess.run(
                [path, "--version"], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        found = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
        return found.group(1) if found else "unknown"
    return None


def describe_machine(now: datetime | None = None) -> dict[str, Any]:
    import duckdb

    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": _os_name(),
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
        "node_exporter": tool_version("prometheus-node-exporter", "node_exporter"),
        "promtool": tool_version("promtool"),
        "date": (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC"),
    }


def machine_line(m: dict[str, Any]) -> str:
    """One sentence for the README: the machine and the versions measured."""
    refs = ", ".join(
        f"{name} {m[key]}" if m.get(key) else f"{name} not installed"
        for key, name in (("node_exporter", "node_exporter"), ("promtool", "promtool"))
    )
    mem = f", {m['memory_gib']} GiB" if m.get("memory_gib") else ""
    return (
        f"Last run {m['date']} on {m['cpu']} ({m['cores']} cores{mem}), {m['os']}; "
        f"Python {m['python']}, DuckDB {m['duckdb']}; references: {refs}."
    )
