"""The node agent's settings, read and checked without pydantic.

The agent runs on every GPU node, so its process carries only what it uses: importing the
whole settings model (pydantic, every component's section) cost it most of its start-up
and a third of its memory. It reads the same layers the same way as every command
(:mod:`gpuscope.core.settings_layers`: defaults < config file < ``GPUSCOPE_<SECTION>__<KEY>``
< flags) and checks the sections it uses itself: ``agent``, ``workloads`` (the rules that
label workload series) and ``logging``, with the same keys, defaults, bounds and messages as
:class:`gpuscope.core.settings.Settings`. The ``agent`` section is declared once, in
:mod:`gpuscope.core.agent_settings`: the full model validates that dataclass, and the checks
here are derived from its fields (:func:`derived_checks`); tests/unit/test_agent_config.py
runs both loaders on random sections. The other sections of a shared config file are the
collector's: the agent accepts them unread. A bad value is one :class:`ConfigError` line
naming the key and where it came from, as everywhere else.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import UnionType
from typing import (
    Annotated,
    Any,
    ClassVar,
    Literal,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from gpuscope.core.agent_settings import AgentSettings, Bounds, Check
from gpuscope.core.errors import ConfigError
from gpuscope.core.settings_layers import Origins, layered, origin_of

#: Every section of the settings (docs/configuration.md); the agent checks only its own.
SECTIONS = (
    "agent",
    "collector",
    "analytics",
    "workloads",
    "actions",
    "alerts",
    "report",
    "logging",
)
WORKLOAD_KINDS = ("interactive", "training", "batch", "inference")
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True, slots=True)
class WorkloadRule:
    """A site rule: pods whose labels match ``match`` are of ``kind``."""

    match: Mapping[str, str]
    kind: str


@dataclass(frozen=True, slots=True)
class WorkloadSettings:
    """The ``workloads`` section: how the agent labels the pods it attributes GPUs to."""

    rules: tuple[WorkloadRule, ...] = ()
    preemptible_priority_below: int = 0
    protected_namespaces: tuple[str, ...] = (
        "kube-system",
        "kube-public",
        "gpu-operator",
        "gpuscope",
    )
    owner_label_keys: tuple[str, ...] = (
        "gpuscope.io/owner",
        "app.kubernetes.io/owner",
        "hub.jupyter.org/username",
        "owner",
        "user",
    )


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """What ``gpuscope agent`` runs with."""

    agent: AgentSettings = field(default_factory=AgentSettings)
    workloads: WorkloadSettings = field(default_factory=WorkloadSettings)
    log_format: Literal["text", "json"] = "text"


class _Invalid(ValueError):
    """A value that does not check; the message is the part after the key."""


# -- one check per kind of value (the full model's wording, so both say the same) ----------
def _text(value: Any) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise _Invalid("Input should be a valid string") from None
    if not isinstance(value, str):
        raise _Invalid("Input should be a valid string")
    return value


def _choice(options: Sequence[str]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if isinstance(value, str) and value in options:
            return value
        quoted = [f"'{o}'" for o in options]
        raise _Invalid(f"Input should be {', '.join(quoted[:-1])} or {quoted[-1]}")

    return check


def _path(value: Any) -> Path:
    if isinstance(value, Path):
        return value
    if not isinstance(value, str):
        raise _Invalid("Input is not a valid path for <class 'pathlib.Path'>")
    return Path(value)


def _optional_path(value: Any) -> Path | None:
    return None if value is None else _path(value)


def _number(value: Any) -> float:
    """A float as pydantic's lax mode takes one: a number, a bool, or text that parses."""
    if isinstance(value, bool | int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise _Invalid(
                "Input should be a valid number, unable to parse string as a number"
            ) from None
    else:
        raise _Invalid("Input should be a valid number")
    if not math.isfinite(number):
        raise _Invalid("Input should be a finite number")
    return number


def _seconds(above: float, at_most: float) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        number = _number(value)
        if not number > above:
            raise _Invalid(f"Input should be greater than {above:g}")
        if not number <= at_most:
            raise _Invalid(f"Input should be less than or equal to {at_most:g}")
        return number

    return check


#: Text pydantic's lax mode reads as an int: ASCII digits (``_`` between them), a sign, and
#: a fraction of zeros at most (``7.0``); not ``1e3``, not other scripts' digits.
_INT_TEXT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0*)?", re.ASCII)


def _integer(value: Any) -> int:
    """An int as pydantic's lax mode takes one (``7``, ``"7"``, ``7.0``, ``"7.0"``)."""
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if not _INT_TEXT.fullmatch(text):
            raise _Invalid("Input should be a valid integer, unable to parse string as an integer")
        return int(text.split(".", 1)[0])
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Invalid("Input should be a finite number")
        if not value.is_integer():
            raise _Invalid("Input should be a valid integer, got a number with a fractional part")
        return int(value)
    raise _Invalid("Input should be a valid integer")


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise _Invalid("Input should be a valid list")
    return tuple(_text(v) for v in value)


def _rules(value: Any) -> tuple[WorkloadRule, ...]:
    if not isinstance(value, list | tuple):
        raise _Invalid("Input should be a valid list")
    rules = []
    for i, rule in enumerate(value):
        if not isinstance(rule, Mapping):
            raise _Invalid(f"rule {i}: Input should be a valid dictionary")
        unknown = set(rule) - {"match", "kind"}
        if unknown:
            raise _Invalid(f"rule {i}: unknown key {sorted(unknown)[0]}")
        if "match" not in rule or "kind" not in rule:
            raise _Invalid(
                f"rule {i}: Field required: {'match' if 'match' not in rule else 'kind'}"
            )
        match = rule["match"]
        if not isinstance(match, Mapping):
            raise _Invalid(f"rule {i}: match: Input should be a valid dictionary")
        try:
            labels = {_text(k): _text(v) for k, v in match.items()}
            kind = _choice(WORKLOAD_KINDS)(rule["kind"])
        except _Invalid as exc:
            raise _Invalid(f"rule {i}: {exc}") from None
        rules.append(WorkloadRule(labels, kind))
    return tuple(rules)


def _checked(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        try:
            return fn(value)
        except ValueError as exc:
            raise _Invalid(str(exc)) from None

    return check


def _then(first: Callable[[Any], Any], second: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: second(first(value))


def _type_check(hint: Any) -> Callable[[Any], Any]:
    """The check of a field's type (what pydantic's lax mode does for it)."""
    if get_origin(hint) is Literal:
        return _choice([str(a) for a in get_args(hint)])
    if get_origin(hint) in (Union, UnionType) and set(get_args(hint)) == {Path, type(None)}:
        return _optional_path
    simple: dict[Any, Callable[[Any], Any]] = {
        str: _text,
        float: _number,
        int: _integer,
        Path: _path,
    }
    if hint in simple:
        return simple[hint]
    raise TypeError(f"no lean check for a setting of type {hint!r}")


def derived_checks(section: type[Any]) -> dict[str, Callable[[Any], Any]]:
    """Per key of a declared section (:mod:`gpuscope.core.agent_settings`), in its order: its
    type's check, then its ``Bounds`` and ``Check`` markers."""
    out: dict[str, Callable[[Any], Any]] = {}
    for name, declared in get_type_hints(section, include_extras=True).items():
        if get_origin(declared) is ClassVar:
            continue
        hint: Any = declared
        markers: tuple[Any, ...] = ()
        if get_origin(declared) is Annotated:
            hint, *rest = get_args(declared)
            markers = tuple(rest)
        check = _type_check(hint)
        for m in markers:
            if isinstance(m, Bounds):
                check = _then(check, _seconds(m.gt, m.le))
            elif isinstance(m, Check):
                check = _then(check, _checked(m.fn))
            else:
                raise TypeError(f"{section.__name__}.{name}: unknown marker {m!r}")
        out[name] = check
    return out


_AGENT_CHECKS = derived_checks(AgentSettings)
_WORKLOAD_CHECKS: dict[str, Callable[[Any], Any]] = {
    "rules": _rules,
    "preemptible_priority_below": _integer,
    "protected_namespaces": _strings,
    "owner_label_keys": _strings,
}
_LOGGING_CHECKS: dict[str, Callable[[Any], Any]] = {"format": _choice(LOG_FORMATS)}


def _section(
    name: str,
    data: Any,
    checks: Mapping[str, Callable[[Any], Any]],
    origin: Origins,
    model: str,
) -> dict[str, Any]:
    """The checked values of one section, in its fields' order (``model``: the section's
    name in the full settings model, which its message names)."""
    if not isinstance(data, Mapping):  # `agent:` left empty in YAML is None: refused too
        raise ConfigError(
            f"invalid setting {name} (from {origin_of(origin, name, '')}): "
            + (
                f"Input should be a dictionary or an instance of {model}"  # a dataclass section
                if model == AgentSettings.__name__
                else f"Input should be a valid dictionary or instance of {model}"
            )
        )
    out: dict[str, Any] = {}
    # the keys in the section's order, then any unknown one (the order the full model
    # reports them in, so both name the same key first)
    for key, check in checks.items():
        if key in data:
            try:
                out[key] = check(data[key])
            except _Invalid as exc:
                where = origin_of(origin, name, key)
                raise ConfigError(f"invalid setting {name}.{key} (from {where}): {exc}") from None
    for key in data:
        if key not in checks:
            where = origin_of(origin, name, str(key))
            raise ConfigError(f"unknown setting {name}.{key} (from {where})")
    return out


def agent_config(merged: Mapping[str, Any], origin: Origins | None = None) -> AgentConfig:
    """Check the merged layers; raises :class:`ConfigError` (one line) on the first bad key."""
    origin = origin or {}
    agent_values = _section(
        "agent", merged.get("agent", {}), _AGENT_CHECKS, origin, "AgentSettings"
    )
    workloads_values = _section(
        "workloads", merged.get("workloads", {}), _WORKLOAD_CHECKS, origin, "WorkloadSettings"
    )
    logging_values = _section(
        "logging", merged.get("logging", {}), _LOGGING_CHECKS, origin, "LoggingSettings"
    )
    agent = AgentSettings(**agent_values)
    workloads = WorkloadSettings(**workloads_values)
    for section in merged:
        if section not in SECTIONS:
            raise ConfigError(
                f"unknown setting {section} (from {origin_of(origin, str(section), '')})"
            )
    return AgentConfig(agent, workloads, logging_values.get("format", "text"))


def load_agent_config(
    config_file: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> AgentConfig:
    """The agent's settings from the file, the environment and flag overrides, in that
    order (as :func:`gpuscope.core.settings.load_settings` reads them)."""
    merged, origin = layered(config_file, env, overrides)
    return agent_config(merged, origin)


def field_names(section: type[Any]) -> list[str]:
    """The keys of a section class, in order (tests compare them with the full model's)."""
    return [f.name for f in fields(section)]
