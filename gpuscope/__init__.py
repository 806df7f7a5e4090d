"""gpuscope: find where GPUs in a Kubernetes cluster are wasted, and why.

This package holds the contracts that every component shares (settings, domain records,
the metric catalogue, workload rules, the cluster simulator) and the CLI. Keep it light:
the node agent imports it, and the agent image must stay small.
"""

__version__ = "0.1.0"
