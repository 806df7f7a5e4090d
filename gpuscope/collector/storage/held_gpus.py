"""How many GPUs a ``workload_intervals`` row stands for: the one rule every reader uses.

Direct scraping opens one interval per GPU a workload holds (``gpu`` is the GPU's index on
its node, ``gpu_uuid`` its uuid). Under fleet summaries (``collector.query.summaries``,
docs/scale.md, "Fleet summaries") one interval stands for a whole workload: ``gpu_uuid``
is its key (``workload:<namespace>/<pod>/<container>``) and ``gpu`` the *number* of GPUs
it holds. A reader that counted rows would count a workload holding 8 GPUs as one GPU,
and one that read ``gpu`` as an index would see index 8.

Named SQL has these substituted (:func:`with_held_gpus`):

- ``{held_gpus}``: the GPUs a row stands for (a DOUBLE: 1 per direct row, the count under
  summaries), over the unqualified columns ``gpu`` and ``gpu_uuid``;
- ``{summary_row}``: true for a summary's row (its ``gpu`` is a count, not an index).

:func:`held_gpus` writes the same expression over other column names (the API reads
``series.gpu`` and ``series.uuid``).
"""

from __future__ import annotations

from gpuscope.collector.querying.fleet_summaries import WORKLOAD_KEY_PREFIX


def summary_row(uuid: str = "gpu_uuid") -> str:
    """SQL: true where ``uuid`` is a fleet summary's workload key."""
    return f"starts_with({uuid}, '{WORKLOAD_KEY_PREFIX}')"


def held_gpus(gpu: str = "gpu", uuid: str = "gpu_uuid") -> str:
    """SQL: how many GPUs a row with these columns stands for (a GPU count that cannot be
    read counts 1: a workload holds at least one GPU)."""
    return (
        f"(CASE WHEN {summary_row(uuid)} THEN coalesce(TRY_CAST({gpu} AS DOUBLE), 1.0)"
        " ELSE 1.0 END)"
    )


def with_held_gpus(sql: str) -> str:
    """``sql`` with ``{held_gpus}`` and ``{summary_row}`` replaced by the rule."""
    return sql.replace("{held_gpus}", held_gpus()).replace("{summary_row}", summary_row())
