"""The what-if replay on the live store, behind ``GET /api/v1/whatif``: the replay of
``gpuscope whatif --db`` (gpuscope/analytics/whatif/week.py) on the collector's own store,
its refusals as HTTP answers.

Apart from gpuscope/service.py, which wires it into the service (``extend_service``) with
the analytics, alerts, actions and report jobs; at the top beside it for the same reason:
it joins the analytics to the collector's API.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings

if TYPE_CHECKING:
    from gpuscope.collector.http_api.api_whatif import CapacityQuery, WhatIf

log = logging.getLogger("gpuscope.service")  # its records keep their name

__all__ = ["check_level", "whatif_on_store"]


def whatif_on_store(store: Store, settings: Settings, clock: Callable[[], float]) -> WhatIf:
    """The replay behind ``GET /api/v1/whatif``: ``gpuscope whatif --db`` on the live store
    (the same :func:`~gpuscope.analytics.whatif.week.replay_window`), its refusals as
    :class:`~gpuscope.collector.http_api.api_whatif.WhatIfRefused` with the HTTP status they
    deserve."""
    from gpuscope.analytics.report.week import Week
    from gpuscope.analytics.whatif.capacity import capacity_whatif, first_seed
    from gpuscope.analytics.whatif.capacity_change import change_of
    from gpuscope.analytics.whatif.gangs_actual import week_figures
    from gpuscope.analytics.whatif.history import read_history
    from gpuscope.analytics.whatif.policies import POLICIES
    from gpuscope.analytics.whatif.week import WEEK_SEEDS, replay_history
    from gpuscope.collector.http_api.api_whatif import WhatIfRefused
    from gpuscope.core.errors import UserError
    from gpuscope.core.timefmt import FIRST_YEAR, LAST_YEAR

    def run(
        week_text: str | None,
        policies: list[str] | None,
        seeds: int | None = None,
        drop: bool = False,
        level: str | None = None,
        capacity: CapacityQuery | None = None,
        calibrate: str | None = None,
    ) -> dict[str, Any]:
        now = datetime.fromtimestamp(clock(), UTC)
        try:
            week = Week.parse(week_text) if week_text else Week.last_complete(now)
            if not FIRST_YEAR <= week.year <= LAST_YEAR:
                raise UserError(f"week {week.label}: expected a year {FIRST_YEAR}..{LAST_YEAR}")
            week.check_over(now)
        except UserError as exc:
            raise WhatIfRefused(400, str(exc)) from None
        change: Any = None
        if capacity is not None:
            try:
                change = change_of(capacity.add_nodes, capacity.remove_nodes, capacity.mig_layout)
            except UserError as exc:
                raise WhatIfRefused(400, str(exc)) from None
            if capacity.policy is not None and capacity.policy not in POLICIES:
                raise WhatIfRefused(
                    400,
                    f"capacity_policy {capacity.policy!r}; expected one of {', '.join(POLICIES)}",
                )
        ran = calibrate or settings.analytics.whatif_policy
        names = list(dict.fromkeys(policies or POLICIES))
        unknown = [p for p in [*names, ran] if p not in POLICIES]
        if unknown:
            raise WhatIfRefused(
                400, f"unknown policy {unknown[0]!r}; expected one of {', '.join(POLICIES)}"
            )
        labels = settings.analytics.topology_labels
        cur = store.cursor()
        try:
            history = read_history(cur, week.start, week.end)
        finally:
            cur.close()
        if level:  # a user's error is answered before the replay, not after it (issue 38)
            check_level(history, labels, level)
        try:
            replayed = replay_history(
                history,
                names,
                seeds=WEEK_SEEDS if seeds is None else seeds,
                drop=drop,
                coverage=settings.analytics.fgd_task_coverage,
                calibrate=ran,
            )
            if replayed is None:
                raise WhatIfRefused(
                    404, f"no pods and GPU nodes stored in {week.label}; nothing to replay"
                )
            out = replayed.figures
            out["summary"].update({"source": "database", "week": week.label})
            # the topology-aware replay of the same week, as `gpuscope whatif --db` prints it
            out["topology"] = week_figures(replayed.history, labels=labels, level=level)
            if capacity is not None:  # a change this week's cluster cannot take: a 400
                out["capacity"] = capacity_whatif(
                    replayed.history, change, capacity.policy or ran,
                    search=capacity.search, coverage=settings.analytics.fgd_task_coverage,
                    replayer=first_seed(settings.analytics.fgd_task_coverage, drop=drop),
                )  # fmt: skip
        except UserError as exc:  # whatever else the input makes the replay refuse: a 400
            raise WhatIfRefused(400, str(exc).splitlines()[0]) from None
        log.info("whatif served week=%s policies=%s", week.label, ",".join(names))
        return out

    return run


def check_level(history: Any, labels: Sequence[str] | None, level: str) -> None:
    """A what-if's ``topology_level`` must be a level with domains on the window's nodes
    (as the topology replay reads them: gpuscope/analytics/whatif/gangs.py); else a 400,
    checked from the nodes alone, before any replay."""
    from gpuscope.analytics.domains.topology_levels import topology_of
    from gpuscope.collector.http_api.api_whatif import WhatIfRefused
    from gpuscope.core.kube_objects import ObjectSet

    topology = topology_of(history.node_infos, ObjectSet(), labels, [level])
    if not topology.domains.get(level):
        known = ", ".join(lv.key for lv in topology.levels if topology.domains.get(lv.key))
        shown = level if len(level) <= 64 else level[:64] + "..."
        raise WhatIfRefused(
            400,
            f"topology_level {shown!r}: no such level on the week's nodes "
            f"(levels: {known or 'none'})",
        )
