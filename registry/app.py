"""The WSGI entry point, kept at the path servers are given:

    gunicorn -c gunicorn.conf.py 'registry.app:create_app()'

The factory itself lives in ``registry.serving.app``.
"""

from registry.serving.app import create_app

__all__ = ["create_app"]
