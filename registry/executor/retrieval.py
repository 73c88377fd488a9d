"""Retrievers: what a ``rag`` agent searches, and the embedded SQLite FTS5 index.

A ``rag`` definition names a retriever (``rag: {retriever: product-docs,
top_k: 4}``); the operator binds a ``Retriever`` to that name
(``--retriever product-docs=FILE``). Any store can implement the interface;
the embedded one, ``SqliteFtsRetriever``, needs no service: it reads an
index that ``build_index`` (``prompt-registry index DIR -o FILE``) writes
from a directory of Markdown and text files.

The index is one SQLite file: a ``meta`` table (format version, what built
it) and an FTS5 table of passages (``title``, ``text``, ``source``), ranked
by BM25, with accents folded and English words stemmed. A passage is a
chunk of one Markdown section (or of a text file), cut at paragraphs, then
lines, sentences and words, to at most ``chunk_chars`` characters.

A query is user text and is never parsed as FTS5 syntax: it is cut into
words, each searched as a quoted string, any of them matching.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import sqlite3
import stat
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

from registry.errors import ConfigurationError
from registry.models import plural

FORMAT_VERSION = 1
"""The index format this module writes and reads; another is refused."""
APPLICATION_ID = 0x50525249
"""SQLite's header field for the application a file belongs to ("PRRI"):
it tells an index of ours from any other database before anything is read."""
SUFFIXES = (".md", ".markdown", ".txt")
"""The files indexed; Markdown is cut into sections by its headings."""
MAX_FILE_BYTES = 10 * 1024 * 1024
"""A larger file is skipped: documentation that big is a data dump."""
MIN_CHUNK_CHARS = 100
"""The smallest ``chunk_chars``: a shorter passage says too little to rank."""
MAX_QUERY_TERMS = 64
"""Distinct words of a query searched; the rest are ignored."""
MAX_TOP_K = 100
"""The most passages one search returns."""

TOKENIZER = "porter unicode61 remove_diacritics 2"
"""FTS5's tokenizer: Unicode words, case and accents folded ("cafe" finds
"café"), English words stemmed ("rotating" finds "rotate")."""
_TITLE_WEIGHT = 2.0
"""BM25 weight of the title column against the text's 1.0: a query that
names a section's heading is about that section."""
# source is UNINDEXED: the words of a path ("md", "docs") would match queries by accident.
_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE passages USING fts5(title, text, source UNINDEXED, tokenize = '{TOKENIZER}');
"""
_SEARCH = f"""
SELECT title, text, source, bm25(passages, {_TITLE_WEIGHT}, 1.0) AS rank
FROM passages WHERE passages MATCH ? ORDER BY rank, rowid LIMIT ?
"""


@dataclass(frozen=True)
class Passage:
    """A piece of a document found by a search."""

    title: str
    """The document's title (its first heading, else its file name), and the
    section's heading when the passage is in one: ``Deploy tokens › Rotating a token``."""
    text: str
    source: str
    """Where it comes from: the file's path in the indexed directory, with
    ``#<section-slug>`` when in a section: ``ops/tokens.md#rotating-a-token``."""
    score: float
    """Relevance to the query, higher is better (BM25 for the SQLite index)."""

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "text": self.text, "source": self.source, "score": self.score}


class Retriever(Protocol):
    """A store of passages a ``rag`` agent searches."""

    description: str
    """For traces and messages: ``sqlite-fts5 docs.sqlite (412 passages)``."""

    def search(self, query: str, *, top_k: int) -> list[Passage]:
        """At most ``top_k`` (1 to 100) passages relevant to ``query``, best
        first. Any text is a query, and never an error: one with nothing to
        search for finds nothing. Called in a worker thread, perhaps in
        several at once. Raises ``registry.errors.ConfigurationError`` for a
        ``top_k`` out of range and when the store cannot be read."""
        ...


class SqliteFtsRetriever:
    """A ``Retriever`` over an index written by ``build_index``, read-only."""

    def __init__(self, path: str | Path) -> None:
        """Open and check the index at ``path``; raises
        ``registry.errors.ConfigurationError`` if it is not one this version reads."""
        self.path = Path(path)
        self._connection, count = _open_index(self.path)
        self.description = f"sqlite-fts5 {self.path} ({plural(count, 'passage')})"
        # One connection, checked once, shared under a lock: a search takes
        # milliseconds, so waiting for one costs little, and every search
        # reads the file that was checked, even after a rebuild replaced it
        # (the open connection keeps the old file).
        self._lock = threading.Lock()

    def search(self, query: str, *, top_k: int) -> list[Passage]:
        if not 1 <= top_k <= MAX_TOP_K:
            raise ConfigurationError(f"top_k must be between 1 and {MAX_TOP_K}, not {top_k}")
        expression = _match_expression(query)
        if expression is None:
            return []
        try:
            with self._lock:
                rows = self._connection.execute(_SEARCH, (expression, top_k)).fetchall()
        except sqlite3.Error as exc:
            raise ConfigurationError(f"retriever index {self.path} cannot be searched: {exc}") from exc
        return [Passage(title=title, text=text, source=source, score=-rank) for title, text, source, rank in rows]

    def close(self) -> None:
        """Close the index; safe to call more than once."""
        with self._lock:
            self._connection.close()


@dataclass(frozen=True)
class IndexSummary:
    """What ``build_index`` wrote."""

    files: int
    passages: int
    skipped: tuple[tuple[str, str], ...]
    """Files that look indexable but were not, each ``(relative path, why)``."""
    bytes: int
    """The size of the index file."""


def build_index(directory: str | Path, output: str | Path, *, chunk_chars: int = 1500) -> IndexSummary:
    """Index the Markdown and text files under ``directory`` into ``output``,
    replacing an index of ours there, never any other file. The index is
    written beside ``output`` and renamed over it, so that a reader sees the
    old index or the new one, never half of one. Raises
    ``registry.errors.ConfigurationError`` for a directory with nothing to
    index, an ``output`` it will not replace, or a ``chunk_chars`` under
    ``MIN_CHUNK_CHARS``."""
    if chunk_chars < MIN_CHUNK_CHARS:
        raise ConfigurationError(f"chunk_chars must be at least {MIN_CHUNK_CHARS}, not {chunk_chars}")
    root = _source_directory(Path(directory))
    target = _replaceable_output(Path(output))
    skipped: list[tuple[str, str]] = []
    documents = list(_documents(root, skipped))
    rows = [row for relative, text in documents for row in _passages(relative, text, chunk_chars)]
    if not rows:
        refused = f" ({plural(len(skipped), 'file')} skipped)" if skipped else ""
        raise ConfigurationError(f"nothing to index in {directory}: no .md, .markdown or .txt file with text{refused}")
    _write_atomically(target, rows, chunk_chars)
    return IndexSummary(files=len(documents), passages=len(rows), skipped=tuple(skipped), bytes=target.stat().st_size)


# --- the query ---------------------------------------------------------------------------


def _match_expression(query: str) -> str | None:
    """An FTS5 expression that finds passages with any of the query's words, or
    None when it has none. Each word is quoted: FTS5 reads a quoted string as
    words to match, never as syntax (``AND``, ``NEAR(``, ``*``, ``col:``)."""
    words = itertools.islice(_unique_words(query), MAX_QUERY_TERMS)
    # A word holds no quote (punctuation separates words), so none escapes its quotes.
    return " OR ".join(f'"{word}"' for word in words) or None


def _unique_words(text: str) -> Iterator[str]:
    seen: set[str] = set()
    for is_word, characters in itertools.groupby(text, key=_is_word_character):
        word = "".join(characters)
        if is_word and word.casefold() not in seen:
            seen.add(word.casefold())
            yield word


def _is_word_character(character: str) -> bool:
    # Letters, digits, marks and private use: a superset of what FTS5's
    # unicode61 keeps, so that a word is never cut where FTS5 would not cut
    # it (FTS5 cuts a quoted word further itself, into a phrase). Marks keep
    # words of scripts like Devanagari whole. NUL (which ends an FTS5
    # string), quotes and lone surrogates (which SQLite cannot encode) are
    # separators.
    category = unicodedata.category(character)
    return category[0] in "LNM" or category == "Co"


# --- opening an index --------------------------------------------------------------------


def _open_index(path: Path) -> tuple[sqlite3.Connection, int]:
    """A read-only connection to the index at ``path``, checked, and its number of passages."""
    if not path.exists():
        raise ConfigurationError(f"retriever index {path} does not exist")
    if not path.is_file():
        raise ConfigurationError(f"retriever index {path} is not a file")
    try:
        connection = _connect_read_only(path)
    except sqlite3.Error as exc:
        raise ConfigurationError(f"retriever index {path} cannot be opened: {exc}") from exc
    try:
        return connection, _checked_passages(connection, path)
    except BaseException:
        connection.close()
        raise


def _checked_passages(connection: sqlite3.Connection, path: Path) -> int:
    """The number of passages of an index this version reads; raises
    ``ConfigurationError`` for any other file."""
    try:
        if not _is_ours(connection):
            raise ConfigurationError(
                f"{path} is not a retriever index (build one with `prompt-registry index DIR -o FILE`)"
            )
        found = connection.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()
        if found is not None and found[0] == str(FORMAT_VERSION):
            # Also checks that this SQLite has FTS5.
            return int(connection.execute("SELECT count(*) FROM passages").fetchone()[0])
    except sqlite3.Error as exc:
        raise ConfigurationError(f"retriever index {path} cannot be read as SQLite: {exc}") from exc
    written = "no format version" if found is None else f"format version {found[0]}"
    raise ConfigurationError(
        f"retriever index {path} has {written}, this prompt-registry reads version {FORMAT_VERSION}:"
        " rebuild it with `prompt-registry index`"
    )


def _connect_read_only(path: Path) -> sqlite3.Connection:
    # A URI, so that SQLite opens the file read-only and never creates one;
    # as_uri() escapes any '?' or '#' in the path.
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)


def _is_ours(connection: sqlite3.Connection) -> bool:
    """Whether the database is an index of ours; raises ``sqlite3.DatabaseError``
    for a file that is not SQLite."""
    return bool(connection.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID)


# --- building an index -------------------------------------------------------------------


class _Unindexable(Exception):
    """A file that is not indexed; the message says why."""


def _source_directory(directory: Path) -> Path:
    if not directory.exists():
        raise ConfigurationError(f"cannot index {directory}: it does not exist")
    if not directory.is_dir():
        raise ConfigurationError(f"cannot index {directory}: it is not a directory")
    return directory.resolve()


def _replaceable_output(output: Path) -> Path:
    """``output``, checked to be a new file or an index of ours."""
    if not output.parent.is_dir():
        raise ConfigurationError(f"cannot write {output}: {output.parent} is not a directory")
    if not output.exists():
        return output
    if not output.is_file():
        raise ConfigurationError(f"cannot write {output}: it exists and is not a file")
    if not _is_index_file(output):
        raise ConfigurationError(f"{output} exists and is not a retriever index: not overwriting it")
    return output


def _is_index_file(path: Path) -> bool:
    """Whether ``path`` is an index of ours, of any format version."""
    try:
        connection = _connect_read_only(path)
    except sqlite3.Error:
        return False
    try:
        return _is_ours(connection)
    except sqlite3.Error:  # not SQLite
        return False
    finally:
        connection.close()


def _documents(root: Path, skipped: list[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """``(relative path, text)`` of each file to index under ``root``, in
    sorted order; a file refused is added to ``skipped`` with why."""
    for path in _candidates(root):
        relative = path.relative_to(root).as_posix()
        try:
            yield relative, _read_text(root, path)
        except _Unindexable as exc:
            skipped.append((relative, str(exc)))


def _candidates(root: Path) -> Iterator[Path]:
    """Files under ``root`` with an indexable suffix, hidden ones and those in
    hidden directories left out. Symlinks to directories are not followed:
    the directory is indexed where it is, if it is under ``root``."""
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(name for name in subdirectories if not name.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and Path(name).suffix.lower() in SUFFIXES:
                yield Path(directory, name)


def _read_text(root: Path, path: Path) -> str:
    """The text of ``path``, with ``\\n`` line ends; raises ``_Unindexable``."""
    # realpath, not resolve(): a symlink loop is then unreadable, not an exception.
    if path.is_symlink() and not Path(os.path.realpath(path)).is_relative_to(root):
        raise _Unindexable("a symlink out of the directory")
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise _Unindexable("not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise _Unindexable(f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        data = path.read_bytes()
    except OSError as exc:
        raise _Unindexable(f"unreadable: {exc.strerror}") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _Unindexable("not UTF-8 text") from exc
    if "\x00" in text:  # valid UTF-8, but binary (or UTF-16)
        raise _Unindexable("not UTF-8 text (it holds NUL bytes)")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _write_atomically(target: Path, rows: Sequence[tuple[str, str, str]], chunk_chars: int) -> None:
    # A hidden name beside the target, so that the rename stays on one file
    # system; SQLite creates the file, with the usual permissions.
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    try:
        connection = sqlite3.connect(temporary)
        try:
            _fill(connection, rows, chunk_chars)
        finally:
            connection.close()
        os.replace(temporary, target)
    except sqlite3.Error as exc:
        raise ConfigurationError(f"cannot write the index {target}: {exc}") from exc
    except OSError as exc:
        raise ConfigurationError(f"cannot write the index {target}: {exc.strerror or exc}") from exc
    finally:
        temporary.unlink(missing_ok=True)


def _fill(connection: sqlite3.Connection, rows: Sequence[tuple[str, str, str]], chunk_chars: int) -> None:
    # No rollback journal: a failed build throws the whole file away.
    connection.execute("PRAGMA journal_mode = OFF")
    connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    connection.executescript(_SCHEMA)
    meta = {
        "format_version": str(FORMAT_VERSION),
        "built_by": f"prompt-registry {_version()} (SQLite {sqlite3.sqlite_version})",
        "tokenizer": TOKENIZER,
        "chunk_chars": str(chunk_chars),
    }
    with connection:
        connection.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta.items())
        connection.executemany("INSERT INTO passages (title, text, source) VALUES (?, ?, ?)", rows)
        # Merge FTS5's segments into one: a smaller file, faster searches.
        connection.execute("INSERT INTO passages (passages) VALUES ('optimize')")


def _version() -> str:
    try:
        return version("prompt-registry")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown"


# --- documents into passages -------------------------------------------------------------


@dataclass(frozen=True)
class _Section:
    """A part of a document under one heading (none: not in a section)."""

    heading: str | None
    slug: str | None
    text: str


_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n---[ \t]*(?:\n|\Z)", re.DOTALL)
_HEADING = re.compile(r" {0,3}#{1,6}(?:[ \t](.*))?")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_SPLITS = (
    (re.compile(r"\n\s*\n"), "\n\n"),  # paragraphs
    (re.compile(r"\n"), "\n"),  # lines
    (re.compile(r"(?<=[.!?])\s+"), " "),  # sentences
    (re.compile(r"\s+"), " "),  # words
)
"""How a text too long for one passage is cut, from the largest piece to the
smallest, each with what joins pieces packed back together."""


def _passages(relative: str, text: str, chunk_chars: int) -> Iterator[tuple[str, str, str]]:
    """``(title, text, source)`` of each passage of one document."""
    name = Path(relative).name
    if Path(relative).suffix.lower() == ".txt":
        title, sections = name, [_Section(None, None, text)]
    else:
        found, sections = _markdown_sections(text)
        title = found or name
    for section in sections:
        heading = f"{title} › {section.heading}" if section.heading else title
        source = f"{relative}#{section.slug}" if section.slug else relative
        for chunk in _chunks(section.text, chunk_chars):
            yield heading, chunk, source


def _markdown_sections(text: str) -> tuple[str | None, list[_Section]]:
    """The document's title (its first heading) and its sections. Text
    before the first heading and under the title's own heading is in no
    section; a heading in a fenced code block is code, not a heading."""
    title: str | None = None
    sections: list[_Section] = []
    heading: str | None = None
    slug: str | None = None
    lines: list[str] = []
    slugs: Counter[str] = Counter()
    fence: str | None = None
    for line in _FRONT_MATTER.sub("", text).split("\n"):
        match = _HEADING.fullmatch(line) if fence is None else None
        if match is None:
            fence = _fence_after(line, fence)
            lines.append(line)
            continue
        sections.append(_Section(heading, slug, "\n".join(lines)))
        lines = []
        words = _heading_text(match.group(1) or "")
        if title is None:
            title = words
        else:
            heading, slug = words, _unique_slug(words, slugs)
    sections.append(_Section(heading, slug, "\n".join(lines)))
    return title or None, sections


def _heading_text(rest: str) -> str:
    """A heading's words, without the closing ``#`` s an ATX heading may end with."""
    text = rest.strip()
    unclosed = text.rstrip("#")
    # Closing #s follow a space; "C#" keeps its own.
    return unclosed.strip() if not unclosed or unclosed[-1] in " \t" else text


def _fence_after(line: str, fence: str | None) -> str | None:
    """The code fence open after ``line`` (``` or ~~~ and its length), given the one open before it."""
    stripped = line.strip()
    if fence is None:
        opening = _FENCE.match(line)
        return opening.group(1) if opening else None
    closes = stripped.startswith(fence) and not stripped.strip(fence[0])
    return None if closes else fence


def _unique_slug(heading: str, seen: Counter[str]) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces
    as hyphens, and ``-1``, ``-2``... after a repeated one."""
    slug = "".join(c for c in heading.lower() if c in " -_" or _is_word_character(c)).replace(" ", "-")
    repeats = seen[slug]
    seen[slug] += 1
    return f"{slug}-{repeats}" if repeats else slug


def _chunks(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, each cut at the
    largest boundary that makes it fit; a word is cut only when it alone is
    longer than ``limit``."""
    return [chunk.strip() for chunk in _split(text.strip(), limit, _SPLITS) if chunk.strip()]


def _split(text: str, limit: int, splits: Sequence[tuple[re.Pattern[str], str]]) -> list[str]:
    if len(text) <= limit:
        return [text]
    if not splits:
        return [text[start : start + limit] for start in range(0, len(text), limit)]
    pattern, joiner = splits[0]
    pieces = [piece for part in pattern.split(text) if part.strip() for piece in _split(part, limit, splits[1:])]
    return _pack(pieces, limit, joiner)


def _pack(pieces: Sequence[str], limit: int, joiner: str) -> list[str]:
    """Consecutive pieces joined while they fit in ``limit`` characters."""
    packed: list[str] = []
    for piece in pieces:
        if packed and len(packed[-1]) + len(joiner) + len(piece) <= limit:
            packed[-1] += joiner + piece
        else:
            packed.append(piece)
    return packed
