"""Settings: one precedence order, and one clear line for every bad value."""

from pathlib import Path

import pytest

from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import load_settings, parse_listen


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


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        # NaN and infinities overflowed the clock sums (OverflowError, exit 1)
        ("collector", {"scrape_interval_seconds": "inf"}, "finite number"),
        ("collector", {"raw_retention_days": "nan"}, "finite number"),
        ("collector", {"projects": [{"name": "p", "guaranteed_gpus": "inf"}]}, "finite number"),
        ("agent", {"source_timeout_seconds": "-inf"}, "finite number"),
        # past a day the schedule's date arithmetic overflowed; under a second is no interval
        ("collector", {"scrape_interval_seconds": 1e12}, "less than or equal to 86400"),
        ("collector", {"scrape_interval_seconds": 1e-9}, "greater than or equal to 1"),
        ("collector", {"inventory_interval_seconds": 0.001}, "greater than or equal to 1"),
        ("analytics", {"interval_minutes": 1e9}, "less than or equal to 10080"),
        ("analytics", {"idle_window_minutes": 1e12}, "less than or equal to 10080"),
        ("collector", {"rollup_1h_retention_days": 1e9}, "less than or equal to 36500"),
        # divisors and sizes
        ("analytics", {"job_sizes": [0]}, "analytics.job_sizes.0"),
        ("analytics", {"nvlink_bytes_per_second": {"H100": 0}}, "nvlink_bytes_per_second.H100"),
        ("analytics", {"pcie_bytes_per_second": {"A100": -1}}, "pcie_bytes_per_second.A100"),
        # URLs need a scheme and a host (notaurl started, then failed every cycle)
        ("collector", {"prometheus_url": "notaurl"}, "expected an http(s) URL"),
        ("collector", {"prometheus_url": "http://"}, "expected an http(s) URL"),
        ("collector", {"targets": [{"url": "http://:9835/metrics"}]}, "collector.targets.0.url"),
        ("agent", {"dcgm_exporter_url": "localhost:9400"}, "expected an http(s) URL"),
        ("collector", {"kubernetes": "kubeconfig"}, "expected auto, none, or the API server"),
        # the https connection's files
        ("collector", {"kubernetes_token_file": "/t"}, "needs an https:// URL"),
        (
            "collector",
            {"kubernetes": "https://k:6443", "kubernetes_client_key_file": "/k"},
            "go together",
        ),
    ],
)
def test_out_of_range_values_give_one_line(
    section: str, values: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env={}, overrides={section: values})
    text = str(err.value)
    assert message in text and "\n" not in text
    assert "(from flags)" in text


def test_a_password_in_a_bad_url_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env={}, overrides={"collector": {"prometheus_url": "http://u:pw@h:99999"}})
    assert "pw" not in str(err.value) and "bad port" in str(err.value)


def test_https_kubernetes_with_its_files_validates() -> None:
    s = load_settings(
        env={},
        overrides={
            "collector": {
                "kubernetes": "https://10.0.0.1:6443",
                "kubernetes_ca_file": "/ca.crt",
                "kubernetes_token_file": "/token",
            }
        },
    )
    assert s.collector.kubernetes_ca_file == Path("/ca.crt")
