"""Durable runs: every task of the Agent Protocol and A2A services runs as a
DBOS workflow, taken from a queue by worker processes.

``engine`` owns DBOS in this process (its configuration, launch and
shutdown), the queue the services put task segments on, and the workflow
that runs one: a loop of DBOS steps, each one step of the task, which DBOS
records once and never repeats after a crash. What a step does is not
known here: the service hands the engine a callable (``Advance``), so that
this package knows nothing of tasks, the store or the executor.
``liveness`` tells live workers from dead ones (a lock each holds while it
lives) and puts a dead worker's unfinished workflows back on the queue for
another, which DBOS alone does only through its hosted Conductor.

May import: the shared modules, and DBOS and SQLAlchemy. Nothing of the
protocol service, the executor or the client: they call in, not out.
"""
