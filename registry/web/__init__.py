"""What both HTTP servers share: the registry's (``registry.serving``) and
the Agent Protocol service's (``registry.protocol``).

Owns the one mapping of errors to RFC 9457 problem responses
(``problems``), bearer tokens (``auth``), request bodies read within a limit
and parsed defensively (``requestbody``) and within a deadline
(``bodydeadline``), the slow lane for expensive requests (``slowlane``),
gunicorn's workers, options, hooks and JSON access log (``server``),
prometheus_client's multiprocess mode (``metricsdir``, ``metrics``) and
gevent's patching of the standard library (``geventpatch``).

May import: the shared modules (``registry.errors``, ``registry.models``,
``registry.settings``) and nothing else of the registry: no git, Redis or
Swagger UI, so that the Agent Protocol service loads none of them.
"""
