"""The registry's service and everything HTTP that is the registry's own.

Owns the registry's operations (``service``) and what they answer
(``answers``), the cache tiers and replica announcements, its metrics, its routes' tokens and bodies, the API
blueprint and its pages, the web UI, the application factory and
``prompt-registry serve``'s gunicorn application. What it shares with the
Agent Protocol service (problem responses, bearer tokens, body limits and
deadlines, the slow lane, gunicorn's workers, multiprocess metrics, gevent)
is ``registry.web``'s.

May import: every package above it (format, rendering, store),
``registry.web`` and the shared modules; of ``registry.evals`` only the
eval file's values and its reader (``dataset``, ``reading``: the UI lists
an agent's eval cases, read-only), which import no executor or client.
Nothing of authoring, the client, the protocol or the CLI.
"""
