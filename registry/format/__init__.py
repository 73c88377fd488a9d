"""The definition format: what an agent definition is, read and checked.

Owns the JSON Schema of a definition, the safe YAML reader, the definition
model and its compilation into something that renders, the typed views of
a valid definition that the runtime reads (``spec``), the inputs schemas
and their budget, the ``Tree`` protocol and loading definitions from one,
digests, bundles, and the semantic diff between two versions of a library
with the SemVer bump it requires. Also the vocabulary the client shares
with the server: the output parsers (what a model's reply means: a tool
call, a final answer or a parse error), which a compiled definition holds,
and release versions (SemVer precedence, selectors, npm-style ranges),
which the store's release index resolves.

May import: ``registry.errors``, ``registry.models`` and
``registry.rendering`` (a compiled definition holds its templates). Nothing
of store, serving, authoring or the CLI.
"""
