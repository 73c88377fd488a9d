"""Unit tests of registry.format: definitions, composites, inputs schemas, safe YAML, diffs, parsers."""
