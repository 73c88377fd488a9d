"""The definition format: what an agent definition is, read and checked.

Owns the JSON Schema of a definition, the safe YAML reader, the definition
model and its compilation into something that renders, the typed views of
a valid definition that the runtime reads (``spec``), the inputs schemas
and their budget, the ``Tree`` protocol and loading definitions from one,
digests, bundles, and the semantic diff between two versions of a library
with the SemVer bump it requires.

May import: ``registry.errors``, ``registry.models``, ``registry.rendering``
and ``registry.agents`` (a compiled definition holds its templates and its
output parser). Nothing of store, serving, authoring or the CLI.
"""
