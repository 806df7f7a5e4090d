"""The weekly report's capacity What-if: how many GPUs would have cleared the week's queue.

The week's stored history (read once for every What-if) goes through
:func:`gpuscope.analytics.whatif.capacity.capacity_whatif` with the search, the function
``gpuscope whatif --db --capacity-search`` runs, under the calibrated policy
(``analytics.whatif_policy``, kube-scheduler's ``leastallocated`` unless configured), so
the figures are the command's for the same week. A short table: the
cluster as it was, then the fewest GPUs of one of its models that would have cut queued
GPU-hours by half and by 90 % (queued GPU-hours, jobs never started, mean wait of GPU jobs,
GPUs allocated on average).

Cost: one replay for the baseline and one per step of the search. The section spends at
most :data:`BUDGET_PODS` pod placements (a replay costs about 2,000-3,000 pods a second,
docs/analytics.md), so the search of a week of ``n`` pods gets ``BUDGET_PODS // n - 1``
replays; a week too busy for :data:`MIN_REPLAYS` of them is not searched, and the section
points to ``gpuscope whatif --db --capacity-search``, which has no such budget.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from gpuscope.analytics.whatif.capacity import CUTS, capacity_whatif, gpus_line
from gpuscope.analytics.whatif.capacity_change import Change
from gpuscope.analytics.whatif.history import History
from gpuscope.core.settings import AnalyticsSettings

#: Pod placements the section may replay (pods in the week times replays).
BUDGET_PODS = 60_000
#: Replays the search needs at the least to answer anything useful.
MIN_REPLAYS = 4
AS_IT_WAS = "as it was"
CUT_LABELS = {"fewest_gpus_half": "half", "fewest_gpus_90": "90 %"}

COLUMNS: dict[str, type[pl.DataType]] = {
    "cluster": pl.String,
    "queue_cut": pl.String,
    "gpus_added": pl.Int64,
    "gpus": pl.Int64,
    "queued_gpu_hours": pl.Float64,
    "jobs_never_started": pl.Int64,
    "mean_wait_hours": pl.Float64,
    "mean_allocated_gpus": pl.Float64,
}


def whatif_capacity_over(
    history: History, settings: AnalyticsSettings, budget: int = BUDGET_PODS
) -> tuple[pl.DataFrame, str]:
    """The section's rows (empty when nothing could be replayed) and its note: the search's
    answers as sentences, or why the week was not searched."""
    empty = pl.DataFrame(schema=COLUMNS)
    if not history.events or not history.inventory.gpu_capacity:
        return empty, ""
    pods = len(history.events)
    replays = budget // pods - 1
    if replays < MIN_REPLAYS:
        return empty, (
            f"{pods:,} pods in the week: too many to search for capacity within the report's "
            f"time; `gpuscope whatif --db PATH --week WEEK --capacity-search` searches it."
        )
    coverage = settings.fgd_task_coverage
    cap = capacity_whatif(
        history, Change(), settings.whatif_policy, search=True, coverage=coverage,
        max_replays=replays,
    )  # fmt: skip
    base = cap["baseline"]
    rows: list[dict[str, Any]] = [_row(AS_IT_WAS, "", 0, base)]
    if not base["queued_gpu_hours"]:
        only = pl.DataFrame(rows, schema=COLUMNS, orient="row")
        return only, f"Nothing queued in the week under {settings.whatif_policy}: no GPU to add."
    for key, _ in CUTS:
        answer = cap.get(key)
        if answer is None or not answer["nodes"]:
            continue
        name = f"+{answer['nodes']} {answer['model']} node{'s' if answer['nodes'] != 1 else ''}"
        figures = answer | {"gpus": base["gpus"] + answer["gpus"]}
        rows.append(_row(name, CUT_LABELS[key], answer["gpus"], figures))
    lines = [gpus_line(cap.get(key), CUT_LABELS[key], base["queued_gpu_hours"]) for key, _ in CUTS]
    if not cap["search"]["complete"]:
        lines.append(
            f"The search stopped at the report's {cap['search']['replays']} replays; "
            "`gpuscope whatif --db PATH --week WEEK --capacity-search` goes further."
        )
    return pl.DataFrame(rows, schema=COLUMNS, orient="row"), " ".join(lines)


def _row(name: str, cut: str, added: int, f: dict[str, Any]) -> dict[str, Any]:
    return {
        "cluster": name,
        "queue_cut": cut,
        "gpus_added": added,
        "gpus": f["gpus"],
        "queued_gpu_hours": f["queued_gpu_hours"],
        "jobs_never_started": f["jobs_never_started"],
        "mean_wait_hours": f["mean_wait_hours_all"],
        "mean_allocated_gpus": f["mean_allocated_gpus"],
    }
