"""gunicorn configuration for running the registry with gunicorn directly:

    gunicorn -c gunicorn.conf.py 'registry.app:create_app()'

It applies the same options as ``prompt-registry serve`` (gthread workers,
JSON access logs, graceful shutdown), taken from the same REGISTRY_*
environment variables (REGISTRY_HOST, REGISTRY_PORT, REGISTRY_WORKERS,
REGISTRY_THREADS, ...). gunicorn's own command-line flags still override it.
"""

from registry.metricsdir import prepare_metrics_directory

# Before anything imports prometheus_client: every worker's metrics are
# added up through files in this directory.
prepare_metrics_directory()

from registry.server import gunicorn_options  # noqa: E402
from registry.settings import Settings  # noqa: E402

globals().update(gunicorn_options(Settings.from_env()))
