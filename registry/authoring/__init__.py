"""What prompt authors run before a merge: lint and its report formats,
examples, the semantic diff and release gate, scaffolding and local renders.

May import: format, rendering, store, agents and the shared modules; the
service (``registry.serving.service``) for reading releases, never the HTTP
layer; the executor, and the client's ``Agent`` it runs, for examples that
script a run (``replies:``). Nothing of the CLI.
"""
