"""The Agent Protocol service: tasks, steps, actions and artifacts over the executor.

``prompt-registry agents serve`` runs it as an ASGI application of its own,
next to the registry: ``app`` (wiring the Flask routes), ``api`` (the
``/ap/v1/agent`` routes), ``asgi`` (the application served: live task
events, and the Flask routes through a2wsgi), ``service`` (what each
request changes), ``requests`` (what a request may say, checked first),
``outputs`` (what a step answers), ``states`` (every entity's state machine
and who may move it), ``events`` (the kinds of a task's event log),
``tasklog`` (writing it), ``hub`` (following it for live subscribers),
``records`` and ``store`` (SQLite or PostgreSQL through SQLAlchemy,
migrated by Alembic) over ``tables`` (its schema), ``server`` (gunicorn
with uvicorn's workers). See docs/agent-protocol.md.

Tasks run on DBOS workers (``registry.runs``): ``advance`` is what a worker
does for one step, ``events`` the kinds of each task's event log.

May import: ``registry.runs`` (the queue tasks run from), ``registry.executor`` and ``registry.client`` (agents are
fetched and run through them), ``registry.rendering`` (the render limits
inputs are checked under), ``registry.format.definition`` (the rule for an
agent's name, and the compiled agent), ``registry.format.spec`` (the typed views of a definition),
``registry.format.safeyaml`` (which PyYAML loader reads our OpenAPI file, as the registry's reads its own), the
shared modules, and ``registry.web``, the HTTP layer both services share
(problem responses, bearer tokens, gunicorn's workers): one way to answer
errors and tokens across both. Nothing of the registry's service
(``registry.serving``) or store: it loads neither git, Redis nor Swagger UI.
"""
