"""The sandbox: rendering untrusted Jinja templates under one policy.

Owns the sandboxed environment and template compilation, the render budget
(output, loop iterations, the clock) and the size estimates behind it. The
server and the client render through it alike.

Every Jinja name beyond Jinja's documented API that the guard needs is
reached through ``jinja_internals``, which says why for each one
(tests/rendering/test_jinja_internals.py fails loudly if a Jinja release changes them).

May import: ``registry.errors`` and ``registry.models``. Nothing else of
the registry.
"""
