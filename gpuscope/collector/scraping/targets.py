"""Which targets to scrape (static and discovered) and how each one is doing.

Discovery asks the Kubernetes API for the agent pods: the EndpointSlices of the agent's
Service, or pods by label. Health is kept per target URL (its password redacted, see
gpuscope/collector/scraping/fetch.py) for ``/api/v1/status``: a target that stops answering, or
whose page is over a limit, shows ``up: false`` with its last error and reason while the others go
on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.core.collector_settings import DiscoverySettings
from gpuscope.core.errors import SourceError

log = logging.getLogger(__name__)


@dataclass
class TargetHealth:
    url: str
    kind: str
    up: bool = False
    last_scrape: float | None = None
    last_success: float | None = None
    last_error: str = ""
    last_duration_seconds: float = 0.0
    last_samples: int = 0
    consecutive_failures: int = 0
    scrapes: int = 0
    failures: int = 0
    #: Ticks of the schedule with no scrape (the previous one, or the process, ran late).
    skipped: int = 0
    #: The first and the latest tick scraped: with ``scrapes`` and ``skipped`` they account
    #: for every tick in between (the first comes at once, the later ones on multiples of
    #: the interval: ``1 + last / interval - floor(first / interval) == scrapes + skipped``).
    first_tick: float | None = None
    last_tick: float | None = None
    parse_errors: int = 0
    #: Why the last failed scrape failed (timeout, sample_limit, ...); empty while up.
    last_reason: str = ""
    #: Failed scrapes and samples left out since the collector started, by reason.
    failures_by_reason: dict[str, int] = field(default_factory=dict)
    samples_dropped: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "kind": self.kind,
            "up": self.up,
            "last_scrape": self.last_scrape,
            "last_success": self.last_success,
            "last_error": self.last_error or None,
            "last_duration_seconds": round(self.last_duration_seconds, 6),
            "last_samples": self.last_samples,
            "consecutive_failures": self.consecutive_failures,
            "scrapes": self.scrapes,
            "failures": self.failures,
            "skipped": self.skipped,
            "first_tick": self.first_tick,
            "last_tick": self.last_tick,
            "parse_errors": self.parse_errors,
            "last_reason": self.last_reason or None,
            "failures_by_reason": dict(sorted(self.failures_by_reason.items())),
            "samples_dropped": dict(sorted(self.samples_dropped.items())),
        }


class TargetRegistry:
    """Static plus discovered targets, and the health of each; safe across threads."""

    def __init__(self, static: Sequence[Target] = ()) -> None:
        self._lock = threading.Lock()
        self._static = list(static)
        self._discovered: list[Target] = []
        self._health: dict[str, TargetHealth] = {}

    def set_discovered(self, targets: Sequence[Target]) -> None:
        with self._lock:
            self._discovered = list(targets)

    def targets(self) -> list[Target]:
        with self._lock:
            seen: dict[str, Target] = {}
            for t in [*self._static, *self._discovered]:
                seen.setdefault(t.url, t)
            return list(seen.values())

    def record(self, outcome: ScrapeOutcome) -> None:
        with self._lock:
            h = self._health.setdefault(
                outcome.target.url, TargetHealth(outcome.target.url, outcome.target.kind)
            )
            h.scrapes += 1
            h.skipped += outcome.skipped_ticks
            if outcome.scheduled_at:
                if h.first_tick is None:
                    h.first_tick = outcome.scheduled_at
                h.last_tick = outcome.scheduled_at
            h.up = outcome.up
            h.last_scrape = outcome.started_at
            h.last_error = outcome.error
            h.last_duration_seconds = outcome.duration_seconds
            h.last_samples = outcome.samples
            h.parse_errors += outcome.parse_errors
            h.last_reason = "" if outcome.up else outcome.reason
            for why, n in outcome.dropped.items():
                h.samples_dropped[why] = h.samples_dropped.get(why, 0) + n
            if not outcome.up:
                why = outcome.reason or "other"
                h.failures_by_reason[why] = h.failures_by_reason.get(why, 0) + 1
            if outcome.up:
                if h.consecutive_failures:
                    log.info(
                        "target up again target=%s after_failures=%d",
                        h.url,
                        h.consecutive_failures,
                    )
                h.last_success = outcome.started_at
                h.consecutive_failures = 0
            else:
                h.failures += 1
                h.consecutive_failures += 1
                if h.consecutive_failures == 1:  # log the change, not every failed scrape
                    log.warning(
                        "target down target=%s reason=%s error=%s",
                        h.url,
                        outcome.reason,
                        outcome.error,
                    )

    def last_scrapes(self) -> list[tuple[str, bool, float, int]]:
        """(URL, up, duration in seconds, samples) of each target's last scrape, for the
        per-target gauges (gpuscope/collector/gauges/target_gauges.py)."""
        with self._lock:
            return [
                (h.url, h.up, h.last_duration_seconds, h.last_samples)
                for h in self._health.values()
            ]

    def status(self) -> list[dict[str, Any]]:
        with self._lock:
            known = {t.url for t in [*self._static, *self._discovered]}
            return [
                (self._health.get(url) or TargetHealth(url, kind)).as_dict()
                for url, kind in sorted(
                    {(t.url, t.kind) for t in [*self._static, *self._discovered]}
                )
                if url in known
            ]


def discover_targets(api_client: Any, settings: DiscoverySettings) -> list[Target]:
    """Agent targets from the Kubernetes API (an ``ApiClient`` of the official client)."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    try:
        if settings.pod_label_selector:
            pods = k8s.CoreV1Api(api_client).list_namespaced_pod(
                settings.namespace, label_selector=settings.pod_label_selector
            )
            return sorted(
                (
                    Target(
                        f"http://{p.status.pod_ip}:{settings.port}{settings.path}",
                        node=p.spec.node_name or "",
                    )
                    for p in pods.items
                    if p.status and p.status.pod_ip and p.status.phase == "Running"
                ),
                key=lambda t: t.url,
            )
        slices = k8s.DiscoveryV1Api(api_client).list_namespaced_endpoint_slice(
            settings.namespace, label_selector=f"kubernetes.io/service-name={settings.service}"
        )
    except ApiException as exc:
        raise SourceError(f"target discovery failed: HTTP {exc.status} {exc.reason}") from None
    except Exception as exc:  # connection errors from urllib3
        raise SourceError(f"target discovery failed: {type(exc).__name__}") from None
    out: list[Target] = []
    for sl in slices.items:
        for ep in sl.endpoints or ():
            ready = ep.conditions is None or ep.conditions.ready is not False
            for address in ep.addresses or ():
                if ready:
                    host = f"[{address}]" if ":" in address else address
                    out.append(
                        Target(
                            f"http://{host}:{settings.port}{settings.path}", node=ep.node_name or ""
                        )
                    )
    return sorted(out, key=lambda t: t.url)
