"""Settings: one precedence order, and one clear line for every bad value."""

from pathlib import Path

import pytest

from gpuscope.errors import ConfigError
from gpuscope.settings import load_settings, parse_listen


def test_flags_beat_env_beat_file_beat_defaults(tmp_path: Path) -> None:
    """Each layer overrides the one below it, key by key, not section by section."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("agent:\n  listen: 127.0.0.1:1000\n  node: from-file\n  sim_seed: 7\n")
    env = {"GPUSCOPE_AGENT__LISTEN": "127.0.0.1:2000", "GPUSCOPE_AGENT__NODE": "from-env"}
    s = load_settings(cfg, env=env, overrides={"agent": {"listen": "127.0.0.1:3000", "node": None}})
    assert s.agent.listen == "127.0.0.1:3000"  # flag
    assert s.agent.node == "from-env"  # env (the flag was not given)
    assert s.agent.sim_seed == 7  # file
    assert s.agent.source_timeout_seconds == 2.0  # default


def test_config_file_named_by_environment(tmp_path: Path) -> None:
    """$GPUSCOPE_CONFIG names the file when no --config is given."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("agent:\n  gpu_source: sim\n")
    assert load_settings(env={"GPUSCOPE_CONFIG": str(cfg)}).agent.gpu_source == "sim"


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("agent:\n  gpu_source: magic\n", {}, "invalid setting agent.gpu_source (from config file"),
        (
            "",
            {"GPUSCOPE_AGENT__LISTEN": "nowhere"},
            "invalid setting agent.listen (from environment)",
        ),
        ("agent:\n  colour: blue\n", {}, "unknown setting agent.colour"),
        ("agent: [1, 2\n", {}, "is not valid YAML at line"),
        ("- a list\n", {}, "must hold a mapping of sections"),
        ("agent:\n  source_timeout_seconds: -1\n", {}, "agent.source_timeout_seconds"),
    ],
)
def test_bad_values_give_one_line(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    """A bad value names the key and where it came from, in one line."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, env=env)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert err.value.exit_code == 2


def test_missing_config_file(tmp_path: Path) -> None:
    """A config file that does not exist is an error, not silently the defaults."""
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.yaml", env={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:9835", ("127.0.0.1", 9835)), (":80", ("0.0.0.0", 80)), ("[::1]:9", ("::1", 9))],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    """HOST:PORT forms, IPv6 in brackets, empty host means all interfaces."""
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["9835", "host:", "host:99999", "host:http"])
def test_parse_listen_rejects(text: str) -> None:
    """Forms without a valid port are refused."""
    with pytest.raises(ValueError):
        parse_listen(text)
