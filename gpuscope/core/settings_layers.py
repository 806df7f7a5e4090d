"""The layers settings are read from (defaults < config file < environment < flags), without
validating them: shared by the full settings model (:mod:`gpuscope.core.settings`, pydantic)
and the node agent's own light loader (:mod:`gpuscope.agent.config`), so both read the same
file, the same ``GPUSCOPE_<SECTION>__<KEY>`` variables and the same flags the same way.

Why a module of its own: the agent runs on every GPU node and must start small, so this
imports neither pydantic nor (until a YAML file is read) PyYAML.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuscope.core.errors import ConfigError

ENV_PREFIX = "GPUSCOPE_"
#: Environment variable that names the config file when no ``--config`` flag is given.
CONFIG_ENV = "GPUSCOPE_CONFIG"


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:9835`` for IPv6) into host and port."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 0..65535")
    host = host.strip("[]") or "0.0.0.0"  # noqa: S104 - ":9835" means all interfaces
    return host, port


def check_http_url(value: str) -> str:
    """``value`` when it is an http(s) URL with a host (and a valid port, if given); the
    error names neither a password nor a token that the URL might carry."""
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError:
        raise ValueError(f"{parts.scheme}://{parts.hostname}: bad port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http(s) URL such as http://host:9090")
    return value


def read_yaml_file(path: Path, what: str) -> Any:
    """The YAML document in ``path`` (None when empty); a missing, unreadable or malformed
    file is one :class:`ConfigError` line naming ``what`` it is ("config file", "policy
    file", ...). Shared by every YAML file gpuscope reads, so they fail alike."""
    import yaml  # only when a file is read: an agent without a config file never loads it

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except UnicodeDecodeError as exc:  # a binary file given by mistake
        raise ConfigError(
            f"{what} {path} is not UTF-8 text (byte {exc.start}): not a YAML file"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{what} {path} is not valid YAML{where}") from None


def read_config_file(path: Path) -> dict[str, Any]:
    data = read_yaml_file(path, "config file")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections")
    return data


def env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """``GPUSCOPE_<SECTION>__<KEY>`` variables as settings; ``__`` also reaches into nested
    sections (``GPUSCOPE_COLLECTOR__DISCOVERY__ENABLED=true``)."""
    out: dict[str, Any] = {}
    for key, value in env.items():
        if not key.startswith(ENV_PREFIX) or key == CONFIG_ENV or "__" not in key:
            continue
        *parents, name = key[len(ENV_PREFIX) :].lower().split("__")
        node = out
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # GPUSCOPE_A__B and GPUSCOPE_A__B__C both set
                raise ConfigError(f"environment variable {key}: {part} is not a section")
            node = child
        if isinstance(node.get(name), dict):
            raise ConfigError(f"environment variable {key}: {name} is a section, not a value")
        node[name] = value
    return out


def merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


#: Where each (section, key) was last set: "config file X", "environment" or "flags"
#: (key "" when a whole section was given as one value).
Origins = dict[tuple[str, str], str]


def layered(
    config_file: Path | None,
    env: Mapping[str, str] | None,
    overrides: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[dict[str, Any], Origins]:
    """The file, the environment and the flags merged in that order, and where each value
    came from (for the one-line error that names it).

    ``overrides`` holds flag values as ``{"agent": {"listen": ...}}``; a ``None`` value
    means the flag was not given and is skipped.
    """
    env = os.environ if env is None else env
    if config_file is None and env.get(CONFIG_ENV):
        config_file = Path(env[CONFIG_ENV])
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if config_file is not None:
        layers.append((f"config file {config_file}", read_config_file(config_file)))
    layers.append(("environment", env_overrides(env)))
    flags = {
        section: {k: v for k, v in values.items() if v is not None}
        for section, values in (overrides or {}).items()
    }
    layers.append(("flags", flags))
    merged: dict[str, Any] = {}
    origin: Origins = {}
    for name, layer in layers:
        merged = merge(merged, layer)
        for section, values in layer.items():
            if isinstance(values, Mapping):
                for key in values:
                    origin[(section, key)] = name
            else:
                origin[(section, "")] = name
    return merged, origin


def origin_of(origin: Origins, section: str, key: str) -> str:
    """Where ``section.key`` came from; for a check across a section's keys (``key`` not
    set itself), the last layer that set any key of the section."""
    where = origin.get((section, key))
    if where is None:
        where = next((o for (sec, _), o in reversed(origin.items()) if sec == section), "defaults")
    return where
