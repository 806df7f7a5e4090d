"""The collector's HTTP API: the FastAPI app, its input checks, JSON answers, OpenAPI
document and named queries."""
