"""gpuscope: find where GPUs in a Kubernetes cluster are wasted, and why.

This package is the application that assembles the components: the CLI (``gpuscope.cli``),
the long-running service (``service.py``) and the demo (``demo*.py``). The shared base every
component imports is ``gpuscope.core``; the simulator is the top-level ``sim`` package.
"""

__version__ = "0.1.0"
