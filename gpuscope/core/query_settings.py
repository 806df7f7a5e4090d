"""``collector.query``: how the collector talks to a Prometheus-compatible query API
(``collector.prometheus_url``): fleet or pull mode, tenant, token, timeouts, the engine's
latency offset and the shards (docs/scale.md, docs/configuration.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class QuerySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    #: ``fleet``: ask the engine 5-minute summaries per bucket (what the detectors need);
    #: ``pull``: copy every ``gpuscope_*`` series at the scrape interval (small clusters).
    mode: Literal["fleet", "pull"] = "fleet"
    #: Sent as ``X-Scope-OrgID`` (Mimir, Cortex, Thanos receive, VictoriaMetrics vmauth).
    tenant: str = ""
    #: A file holding a bearer token, read at every query (a projected token rotates).
    bearer_token_file: Path | None = None
    #: The name of an environment variable holding a bearer token.
    bearer_token_env: str = ""
    #: Each query's own timeout, also sent to the engine (``timeout=``) so it stops too.
    timeout_seconds: float = Field(default=20.0, gt=0, le=600)
    retries: int = Field(default=2, ge=0, le=10)
    backoff_seconds: float = Field(default=1.0, ge=0, le=60)
    #: The newest data the engine hides (VictoriaMetrics ``-search.latencyOffset``, 30 s by
    #: default); steps newer than this are not asked.
    latency_offset_seconds: float = Field(default=30.0, ge=0, le=3600)
    #: Pull mode: at most this many steps a query (halved after a refusal for size).
    max_steps_per_query: int = Field(default=20, ge=1, le=11_000)
    #: Pull mode: steps further behind than this are skipped (counted), never caught up.
    max_lag_steps: int = Field(default=240, ge=1)
    #: Fleet mode: node shards (by a hash of the node name); each query covers one.
    shards: int = Field(default=40, ge=1, le=4096)
    #: Fleet mode: buckets at most a query (halved after a refusal for size).
    max_buckets_per_query: int = Field(default=12, ge=1, le=2000)
    #: Fleet mode: buckets further behind than this are skipped (counted).
    max_lag_buckets: int = Field(default=288, ge=1)
    #: Fleet mode: read the engine's ``gpuscope:*`` recording rules
    #: (dashboards/rules/gpuscope-fleet-rules.yaml) instead of asking ``*_over_time``
    #: (still asked for a node's bucket the rules did not reach: docs/scale.md).
    recording_rules: bool = False
    #: Fleet mode: store per-workload, per-node and hot-port summaries the engine
    #: aggregates instead of every GPU's series (docs/scale.md, "Fleet summaries"): the
    #: collector's cost then grows with workloads, nodes and problems, not GPUs.
    summaries: bool = False
    #: With ``summaries``: node summaries stored only in buckets where they change, and
    #: every node's in each hour's last bucket (docs/scale.md, "What is stored only where
    #: it changes": 14 % fewer samples, no less collector CPU, more engine CPU, measured).
    changes_only: bool = False
    #: Fleet mode: seconds between cycles (each stores the buckets closed since).
    interval_seconds: float = Field(default=60.0, ge=1, le=3600)
    #: Fleet mode: shards asked at once.
    concurrency: int = Field(default=4, ge=1, le=64)
    #: Fleet mode: the most wall time a cycle may take, all shards together (None: 80 % of
    #: ``interval_seconds``); shards not answered by then are left for the next cycle,
    #: which is never starved by the last.
    cycle_deadline_seconds: float | None = Field(default=None, gt=0, le=3600)

    def cycle_deadline(self) -> float:
        """The cycle's wall-time bound in seconds."""
        if self.cycle_deadline_seconds is not None:
            return self.cycle_deadline_seconds
        return 0.8 * self.interval_seconds
