"""Agents at run time: output parsers now; the executor, patterns and the
Agent Protocol of the following issues.

May import: ``registry.errors`` and ``registry.models``.
"""
