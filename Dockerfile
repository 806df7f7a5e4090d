# Two images from one build. The node agent's is small (no duckdb/polars/fastapi: those are
# the `server` extra); the collector's carries them. Both run as an unprivileged user and
# work with a read-only root filesystem (the collector writes only to its data volume).
#   docker build --target agent -t gpuscope-agent .
#   docker build --target collector -t gpuscope-collector .
ARG PYTHON=python:3.11-slim-bookworm

FROM ${PYTHON} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuscope ./gpuscope
RUN python -m venv /opt/agent && /opt/agent/bin/pip install . \
 && python -m venv /opt/collector && /opt/collector/bin/pip install '.[server]' \
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

FROM base AS collector
COPY --from=build /opt/collector /opt/collector
ENV PATH=/opt/collector/bin:$PATH
WORKDIR /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["gpuscope", "collector", "--db", "/data/gpuscope.duckdb", "--listen", "0.0.0.0:8080"]
