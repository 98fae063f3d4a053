# threadbound as a container image: `docker build -t threadbound .`, then
# `docker run -p 3000:3000 --env-file .env -v threadbound-data:/data threadbound`.
# docs/deploy-containers.md: compose, Kubernetes (probes, graceful termination), several replicas on Postgres.
#
# Two stages: the first builds the app and its dependencies into a virtual environment ($VENV); the
# second is a slim Python with that environment and nothing else (no compiler, no pip cache, no
# sources), run as an unprivileged user. tests/test_container.py runs this file's RUN and CMD lines in
# a clean virtual environment (no container engine needed) and checks the rest of it.

ARG PYTHON=python:3.11-slim

FROM ${PYTHON} AS build
ENV VENV=/opt/threadbound PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv "$VENV"
# What the package is made of (.dockerignore keeps tests, docs, .env and data out of the context).
COPY pyproject.toml README.md LICENSE ./
COPY app ./app
COPY channel ./channel
COPY storage ./storage
COPY threadbound_emulator ./threadbound_emulator
RUN "$VENV/bin/pip" install --no-cache-dir . && "$VENV/bin/threadbound" --version

FROM ${PYTHON}
ENV VENV=/opt/threadbound
# No shell wrapper anywhere below: CMD is exec form, so the app is PID 1 and gets SIGTERM itself.
ENV PATH="/opt/threadbound/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOST=0.0.0.0 \
    PORT=3000 \
    DATA_DIR=/data \
    SHUTDOWN_GRACE=20
RUN useradd --system --uid 10001 --home-dir /app --create-home threadbound \
    && mkdir -p /data && chown threadbound /data
COPY --from=build /opt/threadbound /opt/threadbound
# The example MCP server agent.example.toml names; mount your own agent.toml at /app/agent.toml.
COPY --chown=threadbound examples /app/examples
WORKDIR /app
USER threadbound
# SQLite lives here for a single instance; with DATABASE_URL=postgresql://… it stays empty.
VOLUME ["/data"]
EXPOSE 3000
# Liveness: /healthz answers while the process lives (readiness is /readyz, for orchestrators).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '3000'), timeout=4)"]
STOPSIGNAL SIGTERM
CMD ["threadbound", "serve"]
