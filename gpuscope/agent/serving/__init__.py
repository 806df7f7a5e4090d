"""The /metrics page: families, the text and OpenMetrics formats, the agent's own
process metrics, and its HTTP server."""
