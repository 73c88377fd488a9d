"""The example library's own tools and retriever, for ``eval --example``.

The example's eval cases run agents that call tools (assistant/tools_triage,
assistant/react_text, chat/minimal) and one that retrieves
(assistant/docs_rag), so evaluating it needs them bound, as ``run`` binds
them with ``--tools`` and ``--retriever``. With ``--example``, what the
command does not bind itself is bound to the bundled ones: without
``--tools`` or ``--mcp``, the tools of ``library/tools/example.py``
(answered from memory); without ``--retriever``, ``product-docs`` to an
index of ``library/product-docs``, built in a temporary directory removed
when the command ends. So ``prompt-registry eval --example --replay FILE``
needs nothing else on a fresh machine.
"""

from __future__ import annotations

import argparse
import tempfile
from contextlib import ExitStack
from pathlib import Path

from registry.settings import BUNDLED_LIBRARY

EXAMPLE_TOOLS = "registry.library.tools.example:TOOLS"
"""``library/tools/example.py``, imported from the package (``registry/library`` is ``library/``)."""
EXAMPLE_RETRIEVER = "product-docs"
"""The retriever the example's rag agent names (``rag.retriever``)."""
EXAMPLE_DOCUMENTS = BUNDLED_LIBRARY / "product-docs"


def bind_example(args: argparse.Namespace, stack: ExitStack) -> None:
    """With ``--example``, fill in the ``--tools`` and ``--retriever`` of
    ``args`` that are not given with the example's own (``stack`` removes
    the index when it closes)."""
    from registry.executor.retrieval import build_index

    if not args.example:
        return
    if not args.tools and not args.mcp:
        args.tools = [EXAMPLE_TOOLS]
    if not args.retriever:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="prompt-registry-example-docs-")))
        index = directory / f"{EXAMPLE_RETRIEVER}.sqlite"
        build_index(EXAMPLE_DOCUMENTS, index)
        args.retriever = [f"{EXAMPLE_RETRIEVER}={index}"]
