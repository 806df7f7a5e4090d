"""Which pods a PodDisruptionBudget keeps in place now: the budgets' records and rules live
with the inventory that stores them (gpuscope/collector/cluster/pdb_records.py), so plans made from
the database and live plans decide alike; the actions read them from here."""

from __future__ import annotations

from gpuscope.collector.cluster.pdb_records import (
    Budget,
    blocked_by_budgets,
    budget_from_json,
    stored_budgets,
)

__all__ = ["Budget", "blocked_by_budgets", "budget_from_json", "stored_budgets"]
