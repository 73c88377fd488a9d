"""What prompt authors run before a merge: lint and its report formats,
examples, the semantic diff and release gate, scaffolding and local renders.

May import: format, rendering, store, agents and the shared modules; the
service (``registry.serving.service``) for reading releases, never the HTTP
layer. Nothing of the client or the CLI.
"""
