"""gunicorn configuration for running the registry with gunicorn directly:

    gunicorn -c gunicorn.conf.py 'registry.app:create_app()'

It applies the same options as ``prompt-registry serve`` (gevent workers, or
gthread with REGISTRY_WORKER_CLASS=gthread; JSON access logs; graceful
shutdown), taken from the same REGISTRY_* environment variables
(REGISTRY_HOST, REGISTRY_PORT, REGISTRY_WORKERS, REGISTRY_CONNECTIONS, ...).
gunicorn's own command-line flags still override it, except the worker
class: choose it with REGISTRY_WORKER_CLASS, which decides whether the
standard library is patched for gevent here.
"""

from registry.settings import Settings

settings = Settings.from_env()

# First of all: GitPython, redis and prometheus_client must bind gevent's
# socket and subprocess, not the blocking ones (registry.web.geventpatch).
from registry.web.geventpatch import patch_for  # noqa: E402

patch_for(settings)

from registry.web.metricsdir import prepare_metrics_directory  # noqa: E402

# Before anything imports prometheus_client: every worker's metrics are
# added up through files in this directory.
prepare_metrics_directory()

from registry.web.server import gunicorn_options  # noqa: E402

globals().update(gunicorn_options(settings))
