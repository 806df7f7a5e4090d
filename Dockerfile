# The node agent's image: small (no duckdb/polars/fastapi: those are the `server` extra),
# non-root by default, and fine with a read-only root filesystem.
#   docker build --target agent -t gpuscope-agent .
ARG PYTHON=python:3.11-slim-bookworm

FROM ${PYTHON} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuscope ./gpuscope
COPY agent ./agent
COPY collector ./collector
COPY analytics ./analytics
COPY alerts ./alerts
COPY actions ./actions
RUN python -m venv /opt/agent && /opt/agent/bin/pip install . \
 && find /opt -name '__pycache__' -prune -exec rm -rf {} +

FROM ${PYTHON} AS base
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin gpuscope
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001

FROM base AS agent
COPY --from=build /opt/agent /opt/agent
ENV PATH=/opt/agent/bin:$PATH
EXPOSE 9835
HEALTHCHECK --interval=30s --timeout=5s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9835/healthz', timeout=4)"]
ENTRYPOINT ["gpuscope", "agent"]
