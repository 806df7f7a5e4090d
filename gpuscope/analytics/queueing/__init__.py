"""Queues and quota: Kueue's ClusterQueues, LocalQueues and cohorts, KAI's queues and
ResourceQuotas as one tree, what each queue is charged, who may preempt whom, and
quota use over time."""
