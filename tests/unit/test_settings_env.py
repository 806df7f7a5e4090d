"""Settings from the environment reach nested sections too."""

from __future__ import annotations

import pytest

from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import load_settings


def test_a_nested_setting_is_set_from_the_environment() -> None:
    env = {"GPUSCOPE_COLLECTOR__DISCOVERY__ENABLED": "true", "GPUSCOPE_AGENT__LISTEN": ":9999"}
    s = load_settings(env=env)
    assert s.collector.discovery.enabled is True
    assert s.agent.listen == ":9999"


def test_an_unknown_nested_setting_names_itself_and_its_source() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown setting collector\.discovery\.bogus \(from environment\)"
    ):
        load_settings(env={"GPUSCOPE_COLLECTOR__DISCOVERY__BOGUS": "1"})


def test_a_value_and_a_section_of_one_name_is_one_clear_error() -> None:
    env = {"GPUSCOPE_COLLECTOR__DISCOVERY": "x", "GPUSCOPE_COLLECTOR__DISCOVERY__ENABLED": "1"}
    with pytest.raises(ConfigError, match="GPUSCOPE_COLLECTOR__DISCOVERY"):
        load_settings(env=env)
