# prompt-registry: agent prompt definitions served from git, under gunicorn.
#
# Build:
#   docker build -t prompt-registry .
#
# Run with no configuration: serves the bundled example library, tagged
# v1.0.0 and v1.1.0, on port 8080 (/app is not a git checkout):
#   docker run --rm -p 8080:8080 prompt-registry
#
# Serve a git repository by its release tags (v1.2.0, ...). Mount it
# read-only; the registry never writes to it, and new tags pushed to the
# mounted repository are seen on the next request:
#   docker run --rm -p 8080:8080 \
#     -v /path/to/repo:/repo:ro -e REGISTRY_REPO=/repo prompt-registry
#
# Serve a plain directory (uncommitted work) as the release "worktree":
#   docker run --rm -p 8080:8080 \
#     -v /path/to/dir:/worktree:ro -e REGISTRY_WORKTREE=/worktree prompt-registry
#
# Mirror a remote, share a Redis with other replicas, require tokens
# (see docs/replicas.md):
#   docker run --rm -p 8080:8080 -v prompt-data:/data \
#     -e REGISTRY_REMOTE=https://gitlab.example/ai/prompts.git \
#     -e REGISTRY_DATA_DIR=/data -e REDIS_URL=redis://redis:6379/0 \
#     -e REGISTRY_API_TOKENS=... -e REGISTRY_ADMIN_TOKENS=... prompt-registry
#
# Every other setting is an environment variable too (REGISTRY_ROOT,
# REGISTRY_WORKERS, REGISTRY_WORKER_CLASS, REGISTRY_CONNECTIONS, REGISTRY_BODY_SECONDS,
# REGISTRY_LOG_LEVEL, REGISTRY_CACHE_*,
# the REGISTRY_MAX_* limits; see registry/settings.py), and flags after the
# image name are passed to `prompt-registry serve` (e.g. `--workers 4`).
#
# The entry point is gunicorn: `prompt-registry serve` re-executes itself
# (same PID 1) in an interpreter patched for gevent, checks the source once
# (a wrong path fails with one clear line, not in every worker) and then
# becomes gunicorn's arbiter with gunicorn_options(); to run gunicorn's
# own command instead, with the same options:
#   docker run --rm -p 8080:8080 --entrypoint gunicorn prompt-registry \
#     -c gunicorn.conf.py 'registry.app:create_app()'
#
# Check the file with hadolint: `hadolint Dockerfile`.

FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# git runs `git cat-file --batch` for GitPython. A mounted repository is
# usually owned by a host user other than the one the registry runs as, and
# git refuses such repositories ("dubious ownership") unless they are listed
# in safe.directory; the registry only ever reads, so every path is allowed.
# Pinning the Debian package version would break the build at every point
# release of the base image; the base image tag is the pin.
# The service runs as an unprivileged user with a fixed numeric id.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* \
    && git config --system --add safe.directory '*' \
    && useradd --system --create-home --uid 10001 --user-group registry

# A normal (not editable) install, as `pip install prompt-registry` would
# be: the schemas and the example library travel as package data
# (registry/schemas and registry/library link to the copies below).
# Only what the build needs is copied: no tests, docs or bench.
WORKDIR /app
COPY setup.cfg pyproject.toml README.md gunicorn.conf.py ./
COPY registry/ registry/
COPY schemas/ schemas/
COPY library/ library/
RUN pip install --no-cache-dir .

# Code and library stay owned by root: the service cannot modify them.
USER 10001:10001

ENV REGISTRY_HOST=0.0.0.0
EXPOSE 8080

# No curl in the image: python's urllib does the probe. It follows
# REGISTRY_PORT, so change the port with that variable rather than --port.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('REGISTRY_PORT', '8080'), timeout=4)"]

# Exec form: gunicorn's arbiter is PID 1 and gets SIGTERM for a graceful stop.
ENTRYPOINT ["prompt-registry", "serve"]
