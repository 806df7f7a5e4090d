"""Actions: the only package that changes the cluster, and only as its policies say.

A run (``runner.py``: ``gpuscope act`` and the collector's schedule) reads the inventory and
the detectors' findings, turns the YAML policies (``policy.py``) into steps with the pure
planners (``plan.py``), and hands those steps to the executor (``executor.py``, with its
safety gates in ``executor_core.py`` and the consolidation steps in ``node_freeing.py`` and
``reservation.py``). The executor reaches the cluster only through ``kube.py``, the one
Kubernetes wrapper with its retries and typed errors, dry run by default, and writes every
step it plans or carries out to the audit log (``audit.py``).

It sits on top of the layers (``actions -> analytics -> collector``): it may import both,
and nothing below imports it.
"""
