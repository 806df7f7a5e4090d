"""The cluster's Kubernetes objects: the live inventory (list and watch), and nodes,
pods, queues, DRA devices and claims, PodDisruptionBudgets as records."""
