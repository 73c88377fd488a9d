"""Output parsers: what an agent's reply means (a tool call, a final
answer, or a parse error to send back), shared by the client, which parses
locally, and the executor. The executor and the Agent Protocol service
live in ``registry.executor`` and ``registry.protocol``.

May import: ``registry.errors``, ``registry.models`` and
``registry.format.inputschema`` (a parser checks a tool's arguments against
its schema; the format's definitions in turn hold a parser, so the format
module it uses imports nothing of ``agents``).
"""
