"""What prompt authors run before a merge: lint and its report formats,
examples, the semantic diff and release gate, scaffolding and local renders.

``lint`` walks a library and runs the checks of ``lintchecks``, and those
of ``lintevals`` on the eval files beside it; its findings and rule table
are ``lintreport``'s, include cycles ``includegraph``'s, and its output
formats ``lintformat``'s.

May import: format, rendering, store and the shared modules; the
service (``registry.serving.service``) for reading releases, never the HTTP
layer; the executor, and the client's ``Agent`` it runs, for examples that
script a run (``replies:``); the providers' parameter tables
(``registry.providers.params``), to warn about ``model.params`` a provider
does not take; ``registry.evals``, to read the eval files it checks.
Nothing of the CLI.
"""
