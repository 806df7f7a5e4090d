"""The consolidation planner: which pods to move so that pending jobs become placeable.

``plan.py`` is the entry (``plan_consolidation``, ``analyze_consolidation`` and the
greedy baselines); ``model.py`` holds the placement and goal records, ``world.py`` the
cluster seen by the planner, ``search.py`` the production search, ``exhaustive.py`` and
``exact.py`` the references it is checked against (tests and benchmarks).
"""
