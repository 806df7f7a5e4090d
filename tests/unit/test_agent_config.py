"""The agent's own settings loader (no pydantic) reads what the full settings model reads:
same keys, same defaults, same values accepted and refused, one line for a bad one."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.agent.config import (
    _AGENT_CHECKS,
    AgentConfig,
    AgentSettings,
    WorkloadSettings,
    field_names,
    load_agent_config,
)
from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import Settings, load_settings

# Values a config file, an environment variable or a flag may give: numbers, text that
# parses or not, paths, URLs, bounds and their neighbours, wrong types.
VALUES = st.sampled_from(
    [
        None, True, False, 0, 1, -1, 7, 60, 61, 86400, 86401, 2.5, 7.0, 1e3, 0.0,
        float("nan"), float("inf"), "", " ", "0", "7", " 7 ", "7.0", "7.5", "-3", "+3", "1_000",
        "1e3", "nan", "inf", "Infinity", "x", "sim", "SIM", "auto", "nvml", "dcgm", "none",
        "apiserver", "json", "text", "127.0.0.1:9835", ":9835", "[::1]:9835", "host:99999",
        "nowhere", "http://localhost:9400/metrics", "https://h", "ftp://h", "http://h:99999/",
        "http://u:secret@h:1/", "/var/lib/x.sock", "relative/dir", [], ["a"], ["a", 1],
        {"a": "b"}, [{"match": {"a": "b"}, "kind": "training"}],
        [{"match": {"a": "b"}, "kind": "magic"}], [{"match": {"a": "b"}}], ["not a rule"],
        [{"match": {"a": 1}, "kind": "batch"}], [{"match": {"a": "b"}, "kind": "batch", "x": 1}],
    ]
)  # fmt: skip
AGENT_KEYS = st.sampled_from(field_names(AgentSettings))
WORKLOAD_KEYS = st.sampled_from(field_names(WorkloadSettings))


def full_or_error(data: dict[str, Any]) -> Settings | str:
    try:
        return load_settings(env={}, overrides=data)
    except ConfigError as exc:
        return str(exc)


def lean_or_error(data: dict[str, Any]) -> AgentConfig | str:
    try:
        return load_agent_config(env={}, overrides=data)
    except ConfigError as exc:
        return str(exc)


def same_values(lean: AgentConfig, full: Settings) -> None:
    for name in field_names(AgentSettings):
        assert getattr(lean.agent, name) == getattr(full.agent, name), name
    assert lean.workloads.preemptible_priority_below == full.workloads.preemptible_priority_below
    for name in ("protected_namespaces", "owner_label_keys"):
        assert tuple(getattr(lean.workloads, name)) == tuple(getattr(full.workloads, name))
    assert [(dict(r.match), r.kind) for r in lean.workloads.rules] == [
        (r.match, r.kind) for r in full.workloads.rules
    ]
    assert lean.log_format == full.logging.format


def test_the_same_keys_and_defaults_as_the_full_model() -> None:
    """The full model's agent section is the one declaration the lean loader derives its
    checks from (no second copy to drift); the workloads section's keys are the same."""
    assert Settings.model_fields["agent"].annotation is AgentSettings
    assert field_names(AgentSettings) == list(_AGENT_CHECKS)
    assert field_names(WorkloadSettings) == list(
        Settings.model_fields["workloads"].annotation.model_fields
    )  # type: ignore[union-attr]
    same_values(load_agent_config(env={}), load_settings(env={}))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(AGENT_KEYS, VALUES, max_size=3))
def test_agent_values_are_taken_and_refused_as_the_full_model_does(
    values: dict[str, Any],
) -> None:
    """On random agent sections, both loaders accept the same ones with the same values,
    and refuse the same ones naming the same key with the same message."""
    full = full_or_error({"agent": values})
    lean = lean_or_error({"agent": values})
    if isinstance(full, str):
        assert lean == full
    else:
        assert isinstance(lean, AgentConfig), lean
        same_values(lean, full)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(WORKLOAD_KEYS, VALUES, max_size=2), st.sampled_from([None, "json", "x"]))
def test_workload_and_logging_values_are_taken_and_refused_alike(
    values: dict[str, Any], log_format: str | None
) -> None:
    """The workloads rules and the log format: the same accepted and refused, the refusal
    naming the same key (the wording of a nested rule's problem may differ)."""
    data: dict[str, Any] = {"workloads": values, "logging": {"format": log_format}}
    full = full_or_error(data)
    lean = lean_or_error(data)
    if isinstance(full, str):
        assert isinstance(lean, str), (full, lean)
        key = full.split(" (from ")[0].split(" setting ")[1]
        assert lean.split(" (from ")[0].split(" setting ")[1] == ".".join(key.split(".")[:2])
    else:
        assert isinstance(lean, AgentConfig), lean
        same_values(lean, full)


def test_layers_file_env_flags(tmp_path: Path) -> None:
    """Each layer overrides the one below it, key by key, as for every command."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "agent:\n  listen: 127.0.0.1:1000\n  node: from-file\n  sim_seed: 7\n"
        "collector:\n  db: elsewhere.duckdb\n"  # the collector's section: accepted, unread
        "workloads:\n  rules:\n  - match: {team: ml}\n    kind: batch\n"
    )
    env = {"GPUSCOPE_AGENT__LISTEN": "127.0.0.1:2000", "GPUSCOPE_AGENT__NODE": "from-env"}
    got = load_agent_config(cfg, env=env, overrides={"agent": {"listen": "127.0.0.1:3000"}})
    assert (got.agent.listen, got.agent.node, got.agent.sim_seed) == (
        "127.0.0.1:3000",
        "from-env",
        7,
    )
    assert [(dict(r.match), r.kind) for r in got.workloads.rules] == [({"team": "ml"}, "batch")]
    assert dataclasses.is_dataclass(got) and got.agent.source_timeout_seconds == 2.0


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("agent:\n  gpu_source: magic\n", {}, "invalid setting agent.gpu_source (from config file"),
        ("", {"GPUSCOPE_AGENT__LISTEN": "nowhere"}, "invalid setting agent.listen (from environment): expected HOST:PORT"),
        ("agent:\n  colour: blue\n", {}, "unknown setting agent.colour (from config file"),
        ("agnet:\n  node: x\n", {}, "unknown setting agnet (from config file"),
        ("agent: [1, 2\n", {}, "is not valid YAML at line"),
        ("- a list\n", {}, "must hold a mapping of sections"),
        ("", {"GPUSCOPE_AGENT__SOURCE_TIMEOUT_SECONDS": "soon"}, "invalid setting agent.source_timeout_seconds (from environment): Input should be a valid number"),
        ("workloads:\n  rules: [{match: {a: b}, kind: magic}]\n", {}, "invalid setting workloads.rules (from config file"),
        ("logging:\n  format: xml\n", {}, "invalid setting logging.format"),
        ("agent:\n", {}, "invalid setting agent (from config file"),
        ("workloads: 5\n", {}, "invalid setting workloads (from config file"),
    ],
)  # fmt: skip
def test_bad_values_give_one_line(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    """A bad value names the key and where it came from, in one line."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_agent_config(cfg, env=env)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert err.value.exit_code == 2
    with pytest.raises(ConfigError) as full:  # the full model refuses it in the same words
        load_settings(cfg, env=env)
    if message.startswith(("invalid setting agent", "unknown setting agent.", "is not valid")):
        assert str(full.value) == str(err.value)
