"""The service and everything HTTP.

Owns the registry's operations (``service``) and what they answer
(``answers``), the cache tiers and replica announcements, metrics, the one
mapping of errors to problem responses, the API blueprint and its pages,
the application factory and the WSGI server (gunicorn, gevent, the body
deadline and the slow lane).

May import: every package above it (format, rendering, store, agents) and
the shared modules. Nothing of authoring or the client; of the CLI only
``geventserve``, an entry point that patches the interpreter for gevent and
then runs the command line again.
"""
