"""The alerts config (YAML): rules, receivers, the route tree, inhibition, delivery.

docs/alerts.md is its reference. The file is named by ``alerts.config_file`` in the main
settings; the shipped default rules (gpuscope/alerts/default_rules.yaml) are included unless
``default_rules: false``, and a rule of the same name replaces a default one. Secrets
(webhook URLs, tokens, routing keys) come from the file, a file (``*_file``) or an
environment variable (``*_env``); they are held as :class:`pydantic.SecretStr` so they never
print, and are resolved only when a notifier is built.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from gpuscope.alerts.matchers import Matcher, parse_matchers
from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import read_yaml_file

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(value: object) -> float:
    """Seconds from a number or Prometheus-style text (``90s``, ``5m``, ``1h30m``)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    text = str(value).strip()
    if not text or _DURATION.sub("", text):
        raise ValueError(f"bad duration {value!r}: expected e.g. 30s, 5m, 1h30m")
    return sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text))


Duration = Annotated[float, BeforeValidator(parse_duration)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _check_matchers(value: list[str]) -> list[str]:
    parse_matchers(value)
    return value


Matchers = Annotated[list[str], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)]


class _Rule(_Model):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    for_: Duration = Field(default=0.0, alias="for")
    #: Overrides the severity (a finding's own severity otherwise; warning for others).
    severity: Literal["info", "warning", "critical"] | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    #: Jinja2 (sandboxed) templates over labels, value, threshold, evidence, subject.
    summary: str = ""
    description: str = ""


class FindingRule(_Rule):
    """Findings of these kinds and severities (and label matchers) raise an alert each."""

    type: Literal["finding"] = "finding"
    kinds: list[str] = Field(min_length=1)
    severities: list[Literal["info", "warning", "critical"]] = Field(
        default_factory=lambda: ["warning", "critical"]  # type: ignore[arg-type]
    )
    #: Over the alert's labels, which include the finding's subject.
    matchers: Matchers = Field(default_factory=list)

    _v = field_validator("matchers")(_check_matchers)


class MetricRule(_Rule):
    """A threshold over a window of stored samples, per label set in ``by``.

    ``aggregate``: avg, max, min, last, sum (gauges), increase or rate (counters, whose
    samples the store keeps as increases), or ``stale``: the seconds since a series was
    last seen, for series seen in ``lookback`` but not in ``window`` (an agent gone quiet).
    """

    type: Literal["metric"] = "metric"
    metric: str
    matchers: Matchers = Field(default_factory=list)
    aggregate: Literal["avg", "max", "min", "last", "sum", "increase", "rate", "stale"] = "avg"
    window: Duration = 300.0
    lookback: Duration = 86400.0
    op: Literal[">", ">=", "<", "<=", "==", "!="] = ">"
    threshold: float = 0.0
    by: list[str] = Field(default_factory=lambda: ["node"])

    _v = field_validator("matchers")(_check_matchers)


class TargetDownRule(_Rule):
    """A scrape target whose last scrape failed (labels ``target``)."""

    type: Literal["target_down"] = "target_down"
    #: Targets not scraped at all within this long (removed ones) are not alerted.
    lookback: Duration = 600.0


Rule = Annotated[FindingRule | MetricRule | TargetDownRule, Field(discriminator="type")]


class ReceiverConfig(_Model):
    """Where notifications go. ``url`` defaults to the service's public endpoint where
    there is one (Slack Web API, PagerDuty Events v2), so tests and proxies can point it
    elsewhere."""

    name: str
    type: Literal["slack", "pagerduty", "alertmanager", "webhook"]
    url: SecretStr | None = None
    url_file: Path | None = None
    url_env: str = ""
    #: Slack Web API bot token (``chat.postMessage``); without one, ``url`` is an incoming
    #: webhook. For a webhook receiver: a bearer token.
    token: SecretStr | None = None
    token_file: Path | None = None
    token_env: str = ""
    channel: str = ""
    routing_key: SecretStr | None = None
    routing_key_file: Path | None = None
    routing_key_env: str = ""
    send_resolved: bool = True
    #: Least seconds between two messages to this receiver (Slack: about one a second).
    min_interval_seconds: float | None = Field(default=None, ge=0)
    #: Alerts listed in one message; the rest are counted.
    max_alerts: int = Field(default=20, ge=1, le=40)
    #: Alertmanager: how far ahead ``endsAt`` of a firing alert is set (it is re-posted on
    #: every run while it fires, so it resolves by itself if gpuscope stops).
    ends_after: Duration = 1200.0

    @model_validator(mode="after")
    def _needs(self) -> ReceiverConfig:
        has_url = self.url is not None or self.url_file is not None or bool(self.url_env)
        has_token = self.token is not None or self.token_file is not None or bool(self.token_env)
        if self.type == "pagerduty" and not (
            self.routing_key is not None or self.routing_key_file is not None
            or self.routing_key_env
        ):  # fmt: skip
            raise ValueError(f"receiver {self.name}: pagerduty needs routing_key(_file/_env)")
        if self.type == "slack" and not (has_url or has_token):
            raise ValueError(f"receiver {self.name}: slack needs a webhook url or a token")
        if self.type == "slack" and has_token and not self.channel:
            raise ValueError(f"receiver {self.name}: the Slack Web API needs a channel")
        if self.type in ("alertmanager", "webhook") and not has_url:
            raise ValueError(f"receiver {self.name}: {self.type} needs a url")
        return self


class RouteConfig(_Model):
    """Alertmanager-style route: the first matching child wins unless it has ``continue``."""

    receiver: str = ""
    matchers: Matchers = Field(default_factory=list)
    group_by: list[str] | None = None
    repeat_interval: Duration | None = None
    continue_: bool = Field(default=False, alias="continue")
    routes: list[RouteConfig] = Field(default_factory=list)

    _v = field_validator("matchers")(_check_matchers)


class InhibitRule(_Model):
    """Mute alerts matching ``target_matchers`` while one matching ``source_matchers``
    fires with the same values of the ``equal`` labels (a node down mutes its GPUs)."""

    source_matchers: Matchers
    target_matchers: Matchers
    equal: list[str] = Field(default_factory=list)

    _s = field_validator("source_matchers")(_check_matchers)
    _t = field_validator("target_matchers")(_check_matchers)


class DeliveryConfig(_Model):
    timeout_seconds: float = Field(default=10.0, gt=0)
    #: Retries stop when the next attempt would start past this (counted per message).
    deadline_seconds: float = Field(default=120.0, gt=0)
    max_attempts: int = Field(default=6, ge=1)
    backoff_initial_seconds: float = Field(default=1.0, ge=0)
    backoff_max_seconds: float = Field(default=30.0, ge=0)
    #: The longest Retry-After honoured; a longer one fails the attempt.
    max_retry_after_seconds: float = Field(default=60.0, ge=0)


class AlertsConfig(_Model):
    default_rules: bool = True
    rules: list[Rule] = Field(default_factory=list)
    receivers: list[ReceiverConfig] = Field(default_factory=list)
    route: RouteConfig = Field(default_factory=RouteConfig)
    inhibit_rules: list[InhibitRule] | None = None
    delivery: DeliveryConfig = Field(default_factory=DeliveryConfig)
    #: Linked from every message (a Grafana dashboard).
    dashboard_url: str = ""
    #: Defaults of the route tree.
    group_by: list[str] = Field(default_factory=lambda: ["alertname", "namespace"])
    repeat_interval: Duration = 4 * 3600.0
    #: Resolved alerts and ended silences are kept this long.
    retention: Duration = 7 * 86400.0

    @model_validator(mode="after")
    def _receivers_exist(self) -> AlertsConfig:
        names = [r.name for r in self.receivers]
        if len(set(names)) != len(names):
            raise ValueError("receiver names must be unique")
        rules = [r.name for r in self.rules]
        if len(set(rules)) != len(rules):
            raise ValueError("rule names must be unique")

        def walk(route: RouteConfig) -> None:
            if route.receiver and route.receiver not in names:
                raise ValueError(f"route names an unknown receiver {route.receiver!r}")
            for child in route.routes:
                walk(child)

        walk(self.route)
        return self

    def all_rules(self) -> list[FindingRule | MetricRule | TargetDownRule]:
        """The configured rules over the shipped defaults (same name: the configured one)."""
        mine = list(self.rules)
        if not self.default_rules:
            return mine
        names = {r.name for r in mine}
        return [r for r in default_config().rules if r.name not in names] + mine

    def inhibitions(self) -> list[tuple[tuple[Matcher, ...], tuple[Matcher, ...], list[str]]]:
        rules = self.inhibit_rules
        if rules is None:
            rules = default_config().inhibit_rules or [] if self.default_rules else []
        return [
            (parse_matchers(r.source_matchers), parse_matchers(r.target_matchers), r.equal)
            for r in rules
        ]


def _validate(data: Any, where: str) -> AlertsConfig:
    try:
        return AlertsConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top)"
        raise ConfigError(f"{where}: invalid alerts setting {loc}: {err['msg']}") from None


def default_config() -> AlertsConfig:
    """The shipped rules and inhibition (gpuscope/alerts/default_rules.yaml)."""
    text = files("gpuscope.alerts").joinpath("default_rules.yaml").read_text(encoding="utf-8")
    return _validate({**yaml.safe_load(text), "default_rules": False}, "default rules")


def _read_yaml(path: Path) -> Mapping[str, Any]:
    data = read_yaml_file(path, "alerts config")
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"alerts config {path} must hold a mapping")
    return data


def load_alerts_config(path: Path | None) -> AlertsConfig:
    """The alerts config in ``path`` (the defaults alone when None)."""
    if path is None:
        return AlertsConfig()
    return _validate(_read_yaml(path), f"alerts config {path}")


def load_any(path: Path) -> AlertsConfig:
    """An alerts config file, or a main settings file whose ``alerts`` section names one
    (``alerts.config_file``, relative to the settings file): ``gpuscope alerts test
    --config FILE`` takes either."""
    data = _read_yaml(path)
    section = data.get("alerts")
    if isinstance(section, Mapping) and "receivers" not in data:
        target = section.get("config_file")
        if not target:
            raise ConfigError(f"{path}: alerts.config_file is not set")
        target = Path(str(target))
        return load_alerts_config(target if target.is_absolute() else path.parent / target)
    return _validate(data, f"alerts config {path}")


def resolve_secret(
    name: str,
    value: SecretStr | None,
    file: Path | None,
    env_name: str,
    env: Mapping[str, str] | None = None,
) -> str:
    """A secret from the config, a file or an environment variable, in that order; a
    missing one is a ConfigError that names where it was looked for (never its value)."""
    if value is not None:
        return value.get_secret_value()
    if file is not None:
        try:
            return file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"{name}: cannot read {file}: {exc.strerror}") from None
    if env_name:
        got = (os.environ if env is None else env).get(env_name, "")
        if not got:
            raise ConfigError(f"{name}: environment variable {env_name} is not set")
        return got
    return ""
