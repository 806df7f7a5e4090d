"""Whether any placement policy would have made a material difference to a replayed window.

Why: a week's replay under six policies always ranks them, but a ranking of one week is
mostly noise. On the demo's old week (59 pods that never left) "random would have started
the most jobs (59, 58 did)" was one 4-GPU job, and Random is the policy every replay of a
real trace ranks last. So a policy is named only when it beats every other by more than
the spread of the replay itself: the same window replayed with several seeds, each of
which moves every arrival by up to :data:`~gpuscope.analytics.whatif.inputs.ARRIVAL_JITTER_S`
either way (and reseeds the random tie-breaks), and by more than the replay's own error:
the replay of the policy that really ran against what happened
(:mod:`~gpuscope.analytics.whatif.calibration`). A lead above the spread but within that
error is "the replay cannot tell"; below the spread, no policy would have made a material
difference.

The measures, in order: jobs started (more is better), then GPU-hours spent queued (less
is better). For each, the policies are ranked by their mean over seeds; the first gap from
the top that is wider than the range over seeds (max - min) of every policy above it and
of the one below it is material, and then the policies above it are named (several where
they tie: packing policies often do), when the gap is also at least
:data:`MIN_JOBS_SHARE` of the runner-up's jobs started (one job at least) /
:data:`MIN_QUEUED_SHARE` of its queued GPU-hours. One seed has no spread: no policy is
named.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpuscope.analytics.whatif.results import PolicyResult

#: The smallest lead that is material: a job and 1 % of the runner-up's jobs started;
#: 2 % of its GPU-hours queued (and at least one).
MIN_JOBS = 1.0
MIN_JOBS_SHARE = 0.01
MIN_QUEUED_SHARE = 0.02
#: (measure, +1 when more is better / -1 when less is, how the lead is worded)
MEASURES: tuple[tuple[str, int, str], ...] = (
    ("jobs_started", 1, "started {margin} more jobs"),
    ("queued_gpu_hours", -1, "queued {margin} fewer GPU-hours"),
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer: ``material`` with the ``policy``, the ``measure`` it leads on, its lead
    (``margin``, in the measure's unit) and the ``spread`` it beat; else no policy."""

    material: bool
    seeds: int
    text: str
    policy: str | None = None
    runner_up: str | None = None
    measure: str | None = None
    margin: float = 0.0
    spread: float = 0.0
    #: Every policy that did better than noise explains (``policy`` is the first).
    policies: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _num(x: float) -> str:
    """12, 10.3, 4,753: a lead as people read it."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{round(x, 1):g}"


def _floor(measure: str, runner_up_mean: float) -> float:
    if measure == "jobs_started":
        return max(MIN_JOBS, MIN_JOBS_SHARE * abs(runner_up_mean))
    return max(1.0, MIN_QUEUED_SHARE * abs(runner_up_mean))


def verdict(
    results: Sequence[PolicyResult], tolerance: Mapping[str, float] | None = None
) -> Verdict:
    """The verdict on one window's results (every policy, every seed). ``tolerance``: per
    measure, the calibrated replay's own error against what happened
    (:func:`gpuscope.analytics.whatif.calibration.tolerance`); a lead must exceed it too, or
    the replay cannot tell."""
    tolerance = tolerance or {}
    inside_error: tuple[str, str, float, float] | None = None
    by_policy: dict[str, list[PolicyResult]] = {}
    for r in results:
        by_policy.setdefault(r.policy, []).append(r)
    seeds = min((len(runs) for runs in by_policy.values()), default=0)
    if len(by_policy) < 2 or seeds < 2:
        return Verdict(False, seeds, "Too few policies or seeds replayed to tell a "
                       "difference from noise: no policy is named.")  # fmt: skip
    for measure, sign, wording in MEASURES:
        values = {p: [float(getattr(r, measure)) for r in runs] for p, runs in by_policy.items()}
        means = {p: sign * statistics.fmean(v) for p, v in values.items()}
        spreads = {p: max(v) - min(v) for p, v in values.items()}
        ranked = sorted(values, key=lambda p: -means[p])
        # the first gap from the top that is wider than the spread of every policy above
        # it and of the one below: the policies above it did better than noise explains
        for i in range(len(ranked) - 1):
            top, below = ranked[: i + 1], ranked[i + 1]
            margin = means[ranked[i]] - means[below]
            spread = max(spreads[p] for p in (*top, below))
            if margin > spread and margin >= _floor(measure, abs(means[below])):
                error = tolerance.get(measure, 0.0)
                if margin <= error:
                    inside_error = inside_error or (top[0], measure, margin, error)
                    continue
                names = ", ".join(top[:-1]) + (" and " if len(top) > 1 else "") + top[-1]
                lead = wording.format(margin=_num(margin))
                text = (
                    f"{names} would have {lead} than {below}, the next best, on average "
                    f"over {seeds} replays: more than the spread across them "
                    f"({_num(spread)})."
                )
                return Verdict(True, seeds, text, top[0], below, measure, round(margin, 3),
                               round(spread, 3), tuple(top))  # fmt: skip
    if inside_error is not None:
        name, measure, margin, error = inside_error
        unit = "jobs started" if measure == "jobs_started" else "GPU-hours queued"
        return Verdict(
            False,
            seeds,
            f"The replay cannot tell: {name} leads by {_num(margin)} {unit}, more than the "
            f"spread across {seeds} replays but no more than the replay's own error against "
            f"what happened ({_num(error)}).",
            measure=measure,
            margin=round(margin, 3),
        )
    return Verdict(
        False,
        seeds,
        "No placement policy would have made a material difference: jobs started and "
        f"GPU-hours queued differ by no more than the spread across {seeds} replays.",
    )
