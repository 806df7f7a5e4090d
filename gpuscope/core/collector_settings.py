"""The collector's sections of the settings: ``collector`` (its targets, discovery,
projects, store, API and its token's checks) and ``workloads`` (site rules for a pod's kind).

Declared apart from gpuscope/core/settings.py, which gathers every section into one model
and loads it; the agent's section is in gpuscope/core/agent_settings.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gpuscope.core.errors import ConfigError
from gpuscope.core.query_settings import QuerySettings
from gpuscope.core.settings_layers import check_http_url, parse_listen
from gpuscope.core.settings_section import DAY_SECONDS, DB_MEMORY_LIMIT, MAX_DAYS, Section

__all__ = [
    "EXAMPLE_API_TOKENS",
    "KUBE_ACCESS_FILES",
    "MIN_API_TOKEN_LENGTH",
    "CollectorSettings",
    "DiscoverySettings",
    "ProjectSettings",
    "TargetSettings",
    "WorkloadRule",
    "WorkloadSettings",
    "check_api_token",
]


class WorkloadRule(Section):
    """A site rule: pods whose labels match ``match`` are of ``kind``."""

    match: dict[str, str]
    kind: Literal["interactive", "training", "batch", "inference"]


class WorkloadSettings(Section):
    """How pods are classified (docs/design.md, Workloads, projects and quotas)."""

    rules: list[WorkloadRule] = Field(default_factory=list)
    #: Pods with a priority below this may be moved by consolidation.
    preemptible_priority_below: int = 0
    protected_namespaces: list[str] = Field(
        default_factory=lambda: ["kube-system", "kube-public", "gpu-operator", "gpuscope"]
    )
    #: Pod labels that name a workload's owner (a person or team), tried in order; a pod
    #: with none is owned by its controller (``StatefulSet/nb-user05``). Idle findings and
    #: the alerts built on them carry it, for routing.
    owner_label_keys: list[str] = Field(
        default_factory=lambda: [
            "gpuscope.io/owner",
            "app.kubernetes.io/owner",
            "hub.jupyter.org/username",
            "owner",
            "user",
        ]
    )


class TargetSettings(Section):
    """One static scrape target."""

    url: str
    kind: Literal["agent", "dcgm-exporter"] = "agent"
    #: For a dcgm-exporter whose series carry no Hostname label: the node it runs on.
    node: str = ""

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return check_http_url(value)


class DiscoverySettings(Section):
    """Find agent pods through the Kubernetes API: a Service's endpoints, or pods by label."""

    enabled: bool = False
    namespace: str = "gpuscope"
    service: str = "gpuscope-agent"
    #: Used instead of the Service when set, e.g. ``app.kubernetes.io/component=agent``.
    pod_label_selector: str = ""
    port: int = Field(default=9835, ge=1, le=65535)
    path: str = "/metrics"


class ProjectSettings(Section):
    """A project's guaranteed GPUs, as the site's config states them."""

    name: str
    guaranteed_gpus: float = Field(ge=0)
    namespaces: list[str] = Field(default_factory=list)


#: The files of an https connection to the Kubernetes API (``collector.kubernetes_*``).
KUBE_ACCESS_FILES = (
    "kubernetes_ca_file",
    "kubernetes_client_cert_file",
    "kubernetes_client_key_file",
    "kubernetes_token_file",
)


class CollectorSettings(Section):
    db: Path = Path("gpuscope.duckdb")
    listen: str = "127.0.0.1:8080"
    targets: list[TargetSettings] = Field(default_factory=list)
    discovery: DiscoverySettings = Field(default_factory=DiscoverySettings)
    scrape_interval_seconds: float = Field(default=15.0, ge=1, le=DAY_SECONDS)
    #: Must be less than the interval when given; unset, 10 s or 90 % of the interval.
    scrape_timeout_seconds: float = Field(default=10.0, gt=0)
    #: Prometheus's sample_limit: a page with more samples fails its scrape.
    max_series_per_target: int = Field(default=50_000, gt=0)
    #: Prometheus's label_value_length_limit (bytes): a longer value drops its line.
    max_label_value_bytes: int = Field(default=4096, gt=0)
    #: Prometheus's label_limit: a series with more labels fails its scrape.
    max_labels_per_series: int = Field(default=64, gt=0)
    #: Bytes of a page once inflated; more fails the scrape (bounds memory, gzip bombs).
    max_body_bytes: int = Field(default=8 * 2**20, gt=0)
    #: Series churn: new series per hour one target, and all together, may create after
    #: their first page; more are dropped and counted.
    max_new_series_per_target_per_hour: int = Field(default=10_000, ge=0)
    max_new_series_per_hour: int = Field(default=100_000, ge=0)
    #: Series the collector holds at most (up to about 600 bytes of memory each).
    max_series: int = Field(default=1_000_000, gt=0)
    #: How long ingest retries a database that refuses writes before the process exits.
    store_failure_exit_seconds: float = Field(default=60.0, gt=0, le=86_400)
    #: Ingest from this Prometheus-compatible query API instead of scraping (docs/design.md, Scale).
    prometheus_url: str = ""
    #: How that query API is asked: fleet or pull mode, tenant, token, timeouts, shards.
    query: QuerySettings = Field(default_factory=QuerySettings)
    #: Kubernetes API access: ``auto`` (in-cluster, else kubeconfig, else none), ``none``,
    #: or an explicit API server URL (``kubectl proxy``, or https with the options below).
    kubernetes: str = "auto"
    #: With an https URL in ``kubernetes``: the CA bundle that signed the API server's
    #: certificate (else the system's), a client certificate and its key, and a file holding
    #: a bearer token (re-read when it changes, as a projected service-account token does).
    kubernetes_ca_file: Path | None = None
    kubernetes_client_cert_file: Path | None = None
    kubernetes_client_key_file: Path | None = None
    kubernetes_token_file: Path | None = None
    inventory_interval_seconds: float = Field(default=60.0, ge=1, le=DAY_SECONDS)
    raw_retention_days: float = Field(default=14.0, gt=0, le=MAX_DAYS)
    rollup_5m_retention_days: float = Field(default=90.0, gt=0, le=MAX_DAYS)
    rollup_1h_retention_days: float = Field(default=730.0, gt=0, le=MAX_DAYS)
    #: DuckDB's memory_limit for the database (a size such as ``1GB`` or a share of RAM
    #: such as ``25%``): its buffer pool, which beyond this spills to ``<db>.tmp``. DuckDB's
    #: own default is 80 % of RAM, which a roll-up of a week takes (1.3 GB for the demo's).
    db_memory_limit: str = Field(default="1GB", pattern=DB_MEMORY_LIMIT)
    #: DuckDB's threads for the database (None: DuckDB's default, one a core).
    db_threads: int | None = Field(default=None, ge=1, le=256)
    #: DuckDB's threads while the scheduled analytics and alert rules run (null: as
    #: ``db_threads``): their queries are small, and a second thread costs more CPU than
    #: it saves time (gpuscope/collector/storage/thread_scope.py).
    job_db_threads: int | None = Field(default=1, ge=1, le=256)
    #: The database's maintenance (roll-ups, retention, compaction, giving space back) runs
    #: this often: hourly at minute 7 by default; another value runs it every so many
    #: seconds from the start (a test or a benchmark's short window).
    maintenance_interval_seconds: int = Field(default=3600, ge=1, le=DAY_SECONDS)
    #: Closed 5-minute buckets and segments wait this long for late batches before the
    #: maintenance rolls them up or compacts them.
    late_batch_seconds: int = Field(default=60, ge=0, le=3600)
    #: The day being written is compacted in closed segments this long (docs/storage.md);
    #: a divisor of a day, or 0 to compact closed days only.
    compact_segment_seconds: int = Field(default=7200, ge=0, le=DAY_SECONDS)
    #: The last this many seconds of samples are left in scrape order, never compacted
    #: (docs/storage.md, "The day being written"): the scheduled jobs' windows (an alert
    #: rule's hour, the idle look-back) then read their own minutes, not every row of a
    #: compacted span. 65 minutes: the shipped rules' longest window and a run's 5.
    compact_recent_seconds: int = Field(default=3900, ge=0, le=DAY_SECONDS)
    #: After its maintenance the running collector rewrites its file without free blocks
    #: when they are at least this share of it; ``null`` never (``gpuscope db compact``).
    db_reclaim_free_ratio: float | None = Field(default=0.2, gt=0, le=1)
    #: How long that rewrite waits for API readers to finish before it gives up, this time.
    db_reclaim_reader_wait_seconds: float = Field(default=30.0, gt=0, le=3600)
    #: Closed days are exported here as day-partitioned Parquet when set.
    parquet_dir: Path | None = None
    #: Bearer token for endpoints that change anything: given here, or read from a file or
    #: an environment variable (preferred: a secret never sits in the config file).
    api_token: str = ""
    api_token_file: Path | None = None
    api_token_env: str = ""
    #: Whether read endpoints need the token too.
    read_requires_token: bool = False
    #: Whether the expensive read routes (GET /api/v1/whatif, /api/v1/analyze and
    #: /api/v1/report/weekly: seconds to minutes of CPU and up to gigabytes of memory each)
    #: need the token even where reads are open.
    expensive_reads_require_token: bool = False
    #: How many expensive reads may run at once; one more is answered 429 with Retry-After.
    expensive_reads_concurrency: int = Field(default=1, ge=1, le=16)
    #: Replays per policy one GET /api/v1/whatif may ask for (``seeds``); the CLI's own
    #: --seeds on a database file goes up to 100.
    whatif_max_seeds: int = Field(default=10, ge=1, le=100)
    projects: list[ProjectSettings] = Field(default_factory=list)

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("prometheus_url")
    @classmethod
    def _check_prometheus_url(cls, value: str) -> str:
        return value and check_http_url(value)

    @field_validator("kubernetes")
    @classmethod
    def _check_kubernetes(cls, value: str) -> str:
        if value in ("auto", "none"):
            return value
        try:
            return check_http_url(value)
        except ValueError:
            raise ValueError("expected auto, none, or the API server's http(s) URL") from None

    @model_validator(mode="after")
    def _check_kubernetes_access(self) -> CollectorSettings:
        given = [name for name in KUBE_ACCESS_FILES if getattr(self, name) is not None]
        if given and not self.kubernetes.startswith("https://"):
            raise ValueError(f"{given[0]} needs an https:// URL in collector.kubernetes")
        if (self.kubernetes_client_cert_file is None) != (self.kubernetes_client_key_file is None):
            raise ValueError(
                "kubernetes_client_cert_file and kubernetes_client_key_file go together"
            )
        return self

    @field_validator("compact_segment_seconds")
    @classmethod
    def _check_segment(cls, value: int) -> int:
        if value and DAY_SECONDS % value:
            raise ValueError("must divide a day (86400 s): 900, 3600, 7200, ...; or 0")
        return value

    @field_validator("scrape_timeout_seconds")
    @classmethod
    def _check_timeout(cls, value: float, info: ValidationInfo) -> float:
        interval = info.data.get("scrape_interval_seconds")
        if interval is not None and value >= interval:
            raise ValueError(f"must be less than scrape_interval_seconds ({interval:g})")
        return value

    def effective_scrape_timeout(self) -> float:
        """The timeout given, or (unset) 10 s capped to 90 % of the interval."""
        if "scrape_timeout_seconds" in self.model_fields_set:
            return self.scrape_timeout_seconds
        return min(self.scrape_timeout_seconds, 0.9 * self.scrape_interval_seconds)

    def collector_api_token(self, env: Mapping[str, str] | None = None) -> str:
        """The token the collector serves with, refused when guessable (see
        :func:`check_api_token`); empty when none is configured (writes then answer 403)."""
        token = self.resolve_api_token(env)
        check_api_token(token)
        return token

    def resolve_api_token(self, env: Mapping[str, str] | None = None) -> str:
        """The token from the setting, the file or the environment variable, in that order."""
        if self.api_token:
            return self.api_token
        if self.api_token_file is not None:
            try:
                return self.api_token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(
                    f"collector.api_token_file {self.api_token_file}: {exc.strerror}"
                ) from None
        if self.api_token_env:
            return (os.environ if env is None else env).get(self.api_token_env, "")
        return ""


#: The shortest API token the collector accepts: 32 characters, as from
#: ``openssl rand -hex 16`` or ``python -c "import secrets; print(secrets.token_hex(16))"``.
MIN_API_TOKEN_LENGTH = 32
#: Tokens written in the docs and manifests as examples: anyone can read them, so the
#: collector refuses them, as it refuses any token with a placeholder's words in it.
EXAMPLE_API_TOKENS = frozenset({"change-me-long-random-token"})
_PLACEHOLDER_WORDS = ("change-me", "changeme", "replace-me", "example")


def check_api_token(token: str) -> None:
    """Refuse a configured API token that protects nothing: too short to resist guessing, or
    a documented example. An empty token is allowed (no write endpoint then accepts any)."""
    if not token:
        return
    lowered = token.lower()
    if token in EXAMPLE_API_TOKENS or any(w in lowered for w in _PLACEHOLDER_WORDS):
        raise ConfigError(
            "collector API token is an example from the docs; set a random one "
            f"(at least {MIN_API_TOKEN_LENGTH} characters, e.g. openssl rand -hex 16)"
        )
    if len(token) < MIN_API_TOKEN_LENGTH:
        raise ConfigError(
            f"collector API token is {len(token)} characters; at least "
            f"{MIN_API_TOKEN_LENGTH} are needed (e.g. openssl rand -hex 16)"
        )
