"""The definition format: what an agent definition is, read and checked.

Owns the JSON Schema of a definition, the safe YAML reader, the definition
model and its compilation into something that renders, the inputs schemas
and their budget, the ``Tree`` protocol and loading definitions from one,
digests, bundles, the semantic diff between two versions of a library
with the SemVer bump it requires, and the output parsers (what a model's
reply means: a tool call, a final answer or a parse error), which a
compiled definition holds and the client, the server and the executor share.

May import: ``registry.errors``, ``registry.models`` and
``registry.rendering`` (a compiled definition holds its templates). Nothing
of store, serving, authoring or the CLI.
"""
