"""The web UI at ``/ui``: releases, agents, their templates and a render
playground, pattern graphs, diffs between releases, and the Agent Protocol
service's tasks with their pending actions.

Server-rendered (Flask blueprint, Jinja templates with autoescaping: agent
text is untrusted), with a little progressive enhancement in one script of
our own; every asset is served by the app, nothing comes from elsewhere.
Pages read what the API reads, through the same service: ``views`` (the
pages), ``security`` (the Content-Security-Policy, CSRF tokens, the login),
``sessions`` (the bearer token sealed in the session cookie, expiry and
sign-out), ``highlight`` (Jinja
templates coloured by Pygments), ``forms`` (the playground's form from an
``inputs`` schema, and back), ``rendered`` (a render as the playground
shows it, its placeholders marked and what fills each said), ``graphsvg``
(a composite's graph as SVG),
``tasks`` (the Agent Protocol service, called over HTTP by one pooled client
per process).

Part of the HTTP layer, beside the API: it may import what the rest of
``registry.serving`` may, and the service.
"""
