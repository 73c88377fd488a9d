"""``prompt-registry index``: a retrieval index of text and Markdown files,
for ``run --retriever NAME=FILE``."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING

from registry.errors import ConfigurationError
from registry.models import plural

if TYPE_CHECKING:
    from registry.cli.command import Commands


def register(commands: Commands) -> None:
    index = commands.add_parser(
        "index",
        help="build a retrieval index of text and Markdown files",
        description="Index DIR's Markdown and text files into a SQLite FTS5 file (BM25 ranking) that"
        " `run --retriever NAME=FILE` binds to rag agents.",
    )
    index.add_argument("directory", metavar="DIR")
    index.add_argument("-o", "--output", required=True, metavar="FILE")
    index.add_argument("--chunk-chars", type=int, default=1500, metavar="N", help="the longest passage (1500)")
    index.set_defaults(handler=index_command)


def index_command(args: argparse.Namespace, stack: ExitStack) -> int:
    # The executor (and its SQLite FTS code) only when this command runs.
    from registry.executor import build_index

    if not 200 <= args.chunk_chars <= 20000:
        raise ConfigurationError("--chunk-chars must be between 200 and 20000")
    summary = build_index(args.directory, args.output, chunk_chars=args.chunk_chars)
    print(
        f"wrote {args.output}: {plural(summary.passages, 'passage')} from {plural(summary.files, 'file')}"
        + (f", {plural(len(summary.skipped), 'file')} skipped" if summary.skipped else "")
    )
    for path, why in summary.skipped:
        print(f"  skipped {path}: {why}", file=sys.stderr)
    return 0
