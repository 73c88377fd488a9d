"""Unit tests of registry.rendering: the sandbox and the Jinja names it relies on."""
