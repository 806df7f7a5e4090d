"""The Prometheus Operator's ServiceMonitor and PrometheusRule as pydantic models generated
from its CRDs (cloudcoil), for the chart's tests. Imported when a test validates an object,
not when the suite is collected: the models take about 2 s to import, in every worker."""

from __future__ import annotations

from functools import cache
from typing import Any

#: The objects the models validate; every other kind is checked against Kubernetes' schemas.
CRD_KINDS = frozenset({"ServiceMonitor", "PrometheusRule"})


@cache
def crd_model(kind: str) -> Any:
    """The generated model of ``kind`` (one of :data:`CRD_KINDS`)."""
    from cloudcoil.models.prometheus_operator import v1 as prometheus_operator

    return {
        "ServiceMonitor": prometheus_operator.ServiceMonitor,
        "PrometheusRule": prometheus_operator.PrometheusRule,
    }[kind]


def round_trip(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` validated by its CRD's model and dumped back: a field the CRD lacks is
    dropped, so the result differs from ``doc``."""
    model = crd_model(doc["kind"]).model_validate(doc)
    return dict(model.model_dump(mode="json", by_alias=True, exclude_unset=True))
