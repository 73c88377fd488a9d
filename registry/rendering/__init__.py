"""The sandbox: rendering untrusted Jinja templates under one policy.

Owns the sandboxed environment and template compilation, the render budget
(output, loop iterations, the clock) and the size estimates behind it. The
server and the client render through it alike.

May import: ``registry.errors`` and ``registry.models``. Nothing else of
the registry.
"""
