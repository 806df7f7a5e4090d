"""``GET /api/v1/whatif``: a stored week replayed under placement policies.

The replay is in ``analytics``, which the collector must not import (docs/design.md: layers
point one way), so the assembled service hands the API a callable
(:attr:`gpuscope.collector.http_api.api.ApiState.whatif`, set in gpuscope/service.py) and this
module only checks the input and maps the callable's refusals to HTTP answers: 400 for a bad
week, policy or capacity change (``add_nodes``, ``remove_nodes``, ``mig_layout``: the CLI's
``--add-nodes``, ``--remove-nodes``, ``--mig-layout``, parsed on the replay's side), 404 for
a week with nothing stored to replay, 503 when no replay is configured (a bare collector).
It never answers 500 for bad input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, HTTPException, Query


@dataclass(frozen=True, slots=True)
class CapacityQuery:
    """The capacity what-if's parameters as given (the replay parses and checks them)."""

    add_nodes: tuple[str, ...] = ()
    remove_nodes: tuple[str, ...] = ()
    mig_layout: tuple[str, ...] = ()
    search: bool = False
    policy: str | None = None


class WhatIf(Protocol):
    """(week "YYYY-Www" or None for the last complete week, policies or None for all,
    replays per policy or None for the default, drop the unplaceable, the topology level
    or None for each pod group's own, the capacity what-if or None for none, the policy the
    cluster ran or None for ``analytics.whatif_policy``) -> the figures of
    ``gpuscope whatif --db --json``. Raises :class:`WhatIfRefused`."""

    def __call__(
        self,
        week: str | None,
        policies: list[str] | None,
        /,
        seeds: int | None = None,
        drop: bool = False,
        level: str | None = None,
        capacity: CapacityQuery | None = None,
        calibrate: str | None = None,
    ) -> dict[str, Any]: ...


_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")
#: Policies one request may name at most (there are six).
MAX_POLICIES = 16
#: Replays per policy one request may ask for at most (the CLI's --seeds bound); the
#: collector's own bound, ``collector.whatif_max_seeds``, is lower by default.
MAX_SEEDS = 100
#: Capacity changes (add_nodes, remove_nodes, mig_layout together) one request may give.
MAX_CHANGES = 32


class WhatIfRefused(Exception):
    """The replay cannot answer: ``status`` is the HTTP status (400 or 404)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def check_week(text: str) -> str:
    """``YYYY-Www`` naming a real ISO week (400 otherwise)."""
    m = _WEEK.match(text)
    if m is None:
        shown = text if len(text) <= 16 else text[:16] + "..."
        raise HTTPException(400, f"week {shown!r}: expected YYYY-Www, e.g. 2025-W10")
    try:
        date.fromisocalendar(int(m.group(1)), int(m.group(2)), 1)
    except ValueError:
        raise HTTPException(400, f"week {text!r} is not an ISO week") from None
    return text


def _capacity(
    add: list[str] | None,
    remove: list[str] | None,
    mig: list[str] | None,
    search: bool,
    policy: str | None,
) -> CapacityQuery | None:
    """The capacity parameters, None when none is given (400 on too many or too long)."""
    changes = [*(add or ()), *(remove or ()), *(mig or ())]
    if not changes and not search and policy is None:
        return None
    if len(changes) > MAX_CHANGES:
        raise HTTPException(400, f"at most {MAX_CHANGES} capacity changes per request")
    if any(len(c) > 1000 for c in changes):
        raise HTTPException(400, "a capacity change is at most 1000 characters")
    return CapacityQuery(tuple(add or ()), tuple(remove or ()), tuple(mig or ()), search, policy)


def whatif_router(
    get_whatif: Callable[[], WhatIf | None], reader: list[Any], max_seeds: int = MAX_SEEDS
) -> APIRouter:
    """The route; ``get_whatif`` returns the service's replay, or None where there is none;
    ``reader`` its checks (the expensive routes' gate), ``max_seeds`` the most replays per
    policy a request may ask for."""
    router = APIRouter()

    @router.get("/api/v1/whatif", dependencies=reader, tags=["analytics"])
    def whatif(
        week: str | None = None,
        policy: Annotated[list[str] | None, Query()] = None,
        seeds: Annotated[int | None, Query(ge=1, le=MAX_SEEDS)] = None,
        drop: bool = False,
        topology_level: Annotated[str | None, Query(max_length=317)] = None,
        add_nodes: Annotated[list[str] | None, Query()] = None,
        remove_nodes: Annotated[list[str] | None, Query()] = None,
        mig_layout: Annotated[list[str] | None, Query()] = None,
        capacity_search: bool = False,
        capacity_policy: Annotated[str | None, Query(max_length=64)] = None,
        calibrate: Annotated[str | None, Query(max_length=64)] = None,
    ) -> dict[str, Any]:
        """The week (default: the last complete one) replayed under each policy (default:
        all), with what happened and ``gpus_recovered`` per policy: the figures of
        ``gpuscope whatif --db PATH --week WEEK --json`` (``seeds``, ``drop`` and
        ``topology_level`` as its ``--seeds``, ``--drop`` and ``--topology-level``; the CLI
        runs itself through here beside a collector). ``add_nodes``, ``remove_nodes``,
        ``mig_layout`` (each repeatable), ``capacity_search`` and ``capacity_policy`` as
        its capacity flags add the ``capacity`` object; ``calibrate`` as its ``--calibrate``
        (default the collector's ``analytics.whatif_policy``)."""
        run = get_whatif()
        if run is None:
            raise HTTPException(
                503, "what-if replay is not configured on this collector (run `gpuscope collector`)"
            )
        if seeds is not None and seeds > max_seeds:
            raise HTTPException(
                400,
                f"seeds {seeds}: this collector replays at most {max_seeds} per policy "
                "(collector.whatif_max_seeds; or run `gpuscope whatif --db` on a copy)",
            )
        if week is not None:
            check_week(week)
        if policy is not None and len(policy) > MAX_POLICIES:
            raise HTTPException(400, f"at most {MAX_POLICIES} policies per request")
        capacity = _capacity(add_nodes, remove_nodes, mig_layout, capacity_search, capacity_policy)
        try:
            return run(week, policy, seeds, drop, topology_level, capacity, calibrate)
        except WhatIfRefused as exc:
            raise HTTPException(exc.status, exc.detail) from None

    return router
