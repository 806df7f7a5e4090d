"""What-if replay: how a different placement policy would have placed the same pods.

:mod:`~gpuscope.analytics.whatif.events` holds the inputs (node inventory, pod arrivals with their
requests and run times), :mod:`~gpuscope.analytics.whatif.policies` the named placement policies,
:mod:`~gpuscope.analytics.whatif.engine` the replay, :mod:`~gpuscope.analytics.whatif.results` its
records.
"""

from gpuscope.analytics.whatif.engine import replay
from gpuscope.analytics.whatif.events import Inventory, PodEvent, Request
from gpuscope.analytics.whatif.policies import POLICIES
from gpuscope.analytics.whatif.results import Placement, PolicyResult, Sample

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
