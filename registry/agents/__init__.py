"""Agents at run time: output parsers now; the executor, patterns and the
Agent Protocol of the following issues.

May import: ``registry.errors``, ``registry.models`` and
``registry.format.inputschema`` (a parser checks a tool's arguments against
its schema; the format's definitions in turn hold a parser, so the format
module it uses imports nothing of ``agents``).
"""
