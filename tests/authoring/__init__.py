"""Unit tests of registry.authoring: lint, new, render and the examples of the test command."""
