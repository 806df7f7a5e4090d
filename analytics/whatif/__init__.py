"""What-if replay: how a different placement policy would have placed the same pods.

:mod:`~analytics.whatif.events` holds the inputs (node inventory, pod arrivals with their
requests and run times), :mod:`~analytics.whatif.policies` the named placement policies,
:mod:`~analytics.whatif.engine` the replay, :mod:`~analytics.whatif.results` its records.
"""

from analytics.whatif.engine import replay
from analytics.whatif.events import Inventory, PodEvent, Request
from analytics.whatif.policies import POLICIES
from analytics.whatif.results import Placement, PolicyResult, Sample

__all__ = [
    "POLICIES",
    "Inventory",
    "Placement",
    "PodEvent",
    "PolicyResult",
    "Request",
    "Sample",
    "replay",
]
