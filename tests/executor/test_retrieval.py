"""The embedded retriever: indexes built from real directories into real
SQLite files, and searched with any text."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.errors import ConfigurationError
from registry.executor.retrieval import (
    MAX_FILE_BYTES,
    IndexSummary,
    Passage,
    SqliteFtsRetriever,
    build_index,
)

TOKENS_MD = """\
# Deploy tokens

Deploy tokens let a CI job pull images without a personal account.

## Rotating a token

Rotate each deploy token every 90 days, then revoke the old one.

```sh
# this line is a shell comment, not a heading
registry tokens list
```

## Scopes ##

A scope is read or write.

## Using C#

Tokens work from C# clients too.
"""

INSTALL_MD = """\
---
title: front matter is not indexed
---
Read this first.

# Installation

## Requirements

Python and a SQLite with FTS5.

## Requirements

The same heading again, on another platform.
"""


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def stored(index: Path) -> list[tuple[str, str, str]]:
    """Every passage of an index, as (title, text, source), in the order written."""
    with closing(sqlite3.connect(index)) as connection:
        return connection.execute("SELECT title, text, source FROM passages ORDER BY rowid").fetchall()


def write_docs(root: Path) -> Path:
    """A small documentation tree: two Markdown files in subdirectories, one text file."""
    write(root, "ops/tokens.md", TOKENS_MD)
    write(root, "guides/install.md", INSTALL_MD)
    write(root, "notes.txt", "Opening hours of the café.\n\nClosed on Sundays.\n")
    return root


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    return write_docs(tmp_path / "docs")


@pytest.fixture
def retriever(docs: Path, tmp_path: Path) -> Iterator[SqliteFtsRetriever]:
    build_index(docs, tmp_path / "docs.sqlite")
    opened = SqliteFtsRetriever(tmp_path / "docs.sqlite")
    yield opened
    opened.close()


# --- building ------------------------------------------------------------------------------


def test_markdown_headings_become_titles_and_sources_carry_section_slugs(docs: Path, tmp_path: Path) -> None:
    build_index(docs, tmp_path / "docs.sqlite")
    passages = [(title, source) for title, _, source in stored(tmp_path / "docs.sqlite")]
    assert ("Deploy tokens", "ops/tokens.md") in passages
    assert ("Deploy tokens › Rotating a token", "ops/tokens.md#rotating-a-token") in passages
    assert ("Deploy tokens › Scopes", "ops/tokens.md#scopes") in passages
    assert ("Deploy tokens › Using C#", "ops/tokens.md#using-c") in passages


def test_text_before_the_first_heading_and_under_the_title_is_in_no_section(docs: Path, tmp_path: Path) -> None:
    build_index(docs, tmp_path / "docs.sqlite")
    by_text = {text: (title, source) for title, text, source in stored(tmp_path / "docs.sqlite")}
    assert by_text["Read this first."] == ("Installation", "guides/install.md")
    assert by_text["Deploy tokens let a CI job pull images without a personal account."] == (
        "Deploy tokens",
        "ops/tokens.md",
    )


def test_a_repeated_heading_gets_a_numbered_slug_as_on_github(docs: Path, tmp_path: Path) -> None:
    build_index(docs, tmp_path / "docs.sqlite")
    sources = [source for _, _, source in stored(tmp_path / "docs.sqlite") if source.startswith("guides/")]
    assert sources == ["guides/install.md", "guides/install.md#requirements", "guides/install.md#requirements-1"]


def test_a_slug_keeps_letters_and_marks_of_any_script(tmp_path: Path) -> None:
    write(tmp_path / "docs", "lang.md", "# Languages\n\n## हिन्दी (Hindi)\n\nनमस्ते\n\n## Déjà vu!\n\nAgain.\n")
    build_index(tmp_path / "docs", tmp_path / "docs.sqlite")
    assert [source for _, _, source in stored(tmp_path / "docs.sqlite")] == [
        "lang.md#हिन्दी-hindi",
        "lang.md#déjà-vu",
    ]


def test_a_heading_inside_a_code_fence_is_code(docs: Path, tmp_path: Path) -> None:
    build_index(docs, tmp_path / "docs.sqlite")
    rotating = [text for title, text, _ in stored(tmp_path / "docs.sqlite") if title.endswith("Rotating a token")]
    assert rotating == [
        "Rotate each deploy token every 90 days, then revoke the old one.\n\n"
        "```sh\n# this line is a shell comment, not a heading\nregistry tokens list\n```"
    ]


def test_front_matter_is_not_indexed(docs: Path, tmp_path: Path) -> None:
    build_index(docs, tmp_path / "docs.sqlite")
    assert not any("front matter" in text for _, text, _ in stored(tmp_path / "docs.sqlite"))


def test_a_text_file_is_titled_by_its_name(docs: Path, tmp_path: Path) -> None:
    build_index(docs, tmp_path / "docs.sqlite")
    assert ("notes.txt", "Opening hours of the café.\n\nClosed on Sundays.", "notes.txt") in stored(
        tmp_path / "docs.sqlite"
    )


def test_a_markdown_file_without_a_heading_is_titled_by_its_name(tmp_path: Path) -> None:
    write(tmp_path / "docs", "faq.markdown", "No heading here.\n")
    build_index(tmp_path / "docs", tmp_path / "docs.sqlite")
    assert stored(tmp_path / "docs.sqlite") == [("faq.markdown", "No heading here.", "faq.markdown")]


def test_the_summary_counts_files_passages_and_bytes(docs: Path, tmp_path: Path) -> None:
    summary = build_index(docs, tmp_path / "docs.sqlite")
    assert summary == IndexSummary(
        files=3, passages=len(stored(tmp_path / "docs.sqlite")), skipped=(), bytes=summary.bytes
    )
    assert summary.bytes == (tmp_path / "docs.sqlite").stat().st_size


def test_a_rebuild_gives_the_same_passages(docs: Path, tmp_path: Path) -> None:
    first = build_index(docs, tmp_path / "first.sqlite")
    second = build_index(docs, tmp_path / "second.sqlite")
    assert first == second
    assert stored(tmp_path / "first.sqlite") == stored(tmp_path / "second.sqlite")


def test_files_are_indexed_in_sorted_path_order(tmp_path: Path) -> None:
    for name in ("b.md", "a.md", "sub/c.md", "B.txt"):
        write(tmp_path / "docs", name, f"Text of {name}.\n")
    build_index(tmp_path / "docs", tmp_path / "docs.sqlite")
    assert [source for _, _, source in stored(tmp_path / "docs.sqlite")] == ["B.txt", "a.md", "b.md", "sub/c.md"]


# --- chunking ------------------------------------------------------------------------------


def test_a_long_paragraph_is_cut_at_sentences(tmp_path: Path) -> None:
    sentences = [f"Sentence number {n} says something about tokens." for n in range(10)]
    write(tmp_path / "docs", "long.txt", " ".join(sentences))
    build_index(tmp_path / "docs", tmp_path / "docs.sqlite", chunk_chars=120)
    texts = [text for _, text, _ in stored(tmp_path / "docs.sqlite")]
    assert all(len(text) <= 120 for text in texts)
    assert all(text.endswith(".") for text in texts)
    assert " ".join(texts) == " ".join(sentences)


def test_paragraphs_are_packed_together_up_to_chunk_chars(tmp_path: Path) -> None:
    one, two, three = ("One " * 10).strip(), ("Two " * 10).strip(), ("Three " * 10).strip()
    write(tmp_path / "docs", "short.txt", f"{one}\n\n{two}\n\n\n\n{three}\n")
    build_index(tmp_path / "docs", tmp_path / "docs.sqlite", chunk_chars=100)
    assert [text for _, text, _ in stored(tmp_path / "docs.sqlite")] == [f"{one}\n\n{two}", three]


def test_a_word_longer_than_a_chunk_is_cut_into_pieces_of_chunk_chars(tmp_path: Path) -> None:
    write(tmp_path / "docs", "word.txt", "short " + "x" * 250 + " words")
    build_index(tmp_path / "docs", tmp_path / "docs.sqlite", chunk_chars=100)
    assert [text for _, text, _ in stored(tmp_path / "docs.sqlite")] == [
        "short",
        "x" * 100,
        "x" * 100,
        "x" * 50 + " words",
    ]


@pytest.mark.slow  # generated documents, each indexed in SQLite
@given(
    st.lists(
        st.lists(st.text(alphabet="abcdefghij", min_size=1, max_size=30), min_size=1, max_size=40).map(" ".join),
        min_size=1,
        max_size=8,
    ),
    st.integers(min_value=100, max_value=400),
)
@settings(max_examples=50, deadline=None)
def test_passages_never_exceed_chunk_chars_and_keep_every_word_whole(paragraphs: list[str], chunk_chars: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        write(root / "docs", "text.txt", "\n\n".join(paragraphs))
        build_index(root / "docs", root / "docs.sqlite", chunk_chars=chunk_chars)
        texts = [text for _, text, _ in stored(root / "docs.sqlite")]
    assert all(len(text) <= chunk_chars for text in texts)
    assert " ".join(texts).split() == " ".join(paragraphs).split()


def test_chunk_chars_below_the_minimum_is_refused(docs: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="chunk_chars must be at least 100"):
        build_index(docs, tmp_path / "docs.sqlite", chunk_chars=99)


# --- what is indexed -----------------------------------------------------------------------


def test_files_that_are_not_utf8_text_are_skipped_with_why(docs: Path, tmp_path: Path) -> None:
    (docs / "logo.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (docs / "wide.txt").write_bytes("UTF-16 text".encode("utf-16-le"))
    summary = build_index(docs, tmp_path / "docs.sqlite")
    assert summary.skipped == (("logo.md", "not UTF-8 text"), ("wide.txt", "not UTF-8 text (it holds NUL bytes)"))
    assert summary.files == 3


def test_a_file_over_10_mib_is_skipped_with_why(docs: Path, tmp_path: Path) -> None:
    with (docs / "dump.txt").open("wb") as sparse:
        sparse.truncate(MAX_FILE_BYTES + 1)
    summary = build_index(docs, tmp_path / "docs.sqlite")
    assert summary.skipped == (("dump.txt", "larger than 10 MiB"),)


def test_hidden_files_and_directories_are_left_out(docs: Path, tmp_path: Path) -> None:
    write(docs, ".draft.md", "# Hidden draft\n\nsecretword\n")
    write(docs, ".git/notes.md", "secretword\n")
    write(docs, "ops/.cache/page.md", "secretword\n")
    summary = build_index(docs, tmp_path / "docs.sqlite")
    assert summary.skipped == ()
    assert not any("secretword" in text for _, text, _ in stored(tmp_path / "docs.sqlite"))


def test_files_of_other_kinds_are_left_out(docs: Path, tmp_path: Path) -> None:
    write(docs, "script.py", "print('secretword')\n")
    write(docs, "page.html", "<p>secretword</p>\n")
    summary = build_index(docs, tmp_path / "docs.sqlite")
    assert (summary.files, summary.skipped) == (3, ())


def test_a_symlink_out_of_the_directory_is_skipped_with_why(docs: Path, tmp_path: Path) -> None:
    secret = write(tmp_path / "private", "secret.md", "secretword\n")
    (docs / "leak.md").symlink_to(secret)
    (docs / "leaked").symlink_to(secret.parent, target_is_directory=True)
    (docs / "loop.md").symlink_to(docs / "loop.md")
    summary = build_index(docs, tmp_path / "docs.sqlite")
    assert summary.skipped == (
        ("leak.md", "a symlink out of the directory"),
        ("loop.md", "unreadable: Too many levels of symbolic links"),
    )
    assert not any("secretword" in text for _, text, _ in stored(tmp_path / "docs.sqlite"))


def test_a_symlink_inside_the_directory_is_indexed(docs: Path, tmp_path: Path) -> None:
    (docs / "alias.txt").symlink_to(docs / "notes.txt")
    summary = build_index(docs, tmp_path / "docs.sqlite")
    assert (summary.files, summary.skipped) == (4, ())
    assert "alias.txt" in {source for _, _, source in stored(tmp_path / "docs.sqlite")}


# --- refusals when building ----------------------------------------------------------------


def test_a_directory_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        build_index(tmp_path / "missing", tmp_path / "docs.sqlite")


def test_a_file_is_refused_as_the_directory(docs: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is not a directory"):
        build_index(docs / "notes.txt", tmp_path / "docs.sqlite")


def test_a_directory_with_nothing_to_index_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "docs", "script.py", "print()\n")
    write(tmp_path / "docs", "empty.md", "\n\n")
    (tmp_path / "docs" / "logo.md").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigurationError, match=r"nothing to index in .*\(1 file skipped\)"):
        build_index(tmp_path / "docs", tmp_path / "docs.sqlite")
    assert not (tmp_path / "docs.sqlite").exists()


def test_an_existing_file_that_is_not_an_index_is_never_overwritten(docs: Path, tmp_path: Path) -> None:
    precious = write(tmp_path, "thesis.txt", "years of work\n")
    with pytest.raises(ConfigurationError, match="not a retriever index: not overwriting it"):
        build_index(docs, precious)
    assert precious.read_text(encoding="utf-8") == "years of work\n"


def test_an_existing_database_of_another_application_is_never_overwritten(docs: Path, tmp_path: Path) -> None:
    with closing(sqlite3.connect(tmp_path / "app.sqlite")) as connection:
        connection.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    with pytest.raises(ConfigurationError, match="not a retriever index"):
        build_index(docs, tmp_path / "app.sqlite")


def test_a_directory_as_the_output_is_refused(docs: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is not a file"):
        build_index(docs, tmp_path)


def test_an_output_in_a_missing_directory_is_refused(docs: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is not a directory"):
        build_index(docs, tmp_path / "missing" / "docs.sqlite")


def test_an_existing_index_is_replaced_by_renaming_a_new_file_over_it(docs: Path, tmp_path: Path) -> None:
    index = tmp_path / "out" / "docs.sqlite"
    index.parent.mkdir()
    build_index(docs, index)
    before = SqliteFtsRetriever(index)
    old_file = index.stat().st_ino
    (docs / "notes.txt").unlink()
    write(docs, "menu.txt", "Espresso and croissants.\n")
    build_index(docs, index)
    after = SqliteFtsRetriever(index)
    try:
        assert index.stat().st_ino != old_file
        assert os.listdir(index.parent) == ["docs.sqlite"]  # no temporary file left behind
        # A reader opened before keeps the index it opened, whole.
        assert [p.source for p in before.search("café croissants", top_k=5)] == ["notes.txt"]
        assert [p.source for p in after.search("café croissants", top_k=5)] == ["menu.txt"]
    finally:
        before.close()
        after.close()


# --- searching -----------------------------------------------------------------------------


def test_the_passage_that_matches_the_query_best_comes_first(tmp_path: Path) -> None:
    for n in range(6):
        write(tmp_path / "docs", f"filler{n}.md", f"# Page {n}\n\nNothing about the subject on page {n}.\n")
    write(tmp_path / "docs", "webhooks.md", "# Webhooks\n\nA webhook secret signs each webhook delivery.\n")
    write(tmp_path / "docs", "secrets.md", "# Secrets\n\nA secret is stored encrypted.\n")
    build_index(tmp_path / "docs", tmp_path / "docs.sqlite")
    with closing(SqliteFtsRetriever(tmp_path / "docs.sqlite")) as retriever:
        found = retriever.search("webhook secret", top_k=4)
    assert [p.source for p in found] == ["webhooks.md", "secrets.md"]
    assert found[0].score > found[1].score > 0


def test_a_passage_is_found_by_its_section_heading(retriever: SqliteFtsRetriever) -> None:
    assert retriever.search("scopes", top_k=1)[0].source == "ops/tokens.md#scopes"


def test_words_are_found_by_their_stem(retriever: SqliteFtsRetriever) -> None:
    assert retriever.search("rotating", top_k=1)[0].source == "ops/tokens.md#rotating-a-token"
    assert retriever.search("revoked", top_k=1)[0].source == "ops/tokens.md#rotating-a-token"


def test_accents_and_case_are_folded(retriever: SqliteFtsRetriever) -> None:
    assert [p.source for p in retriever.search("CAFE", top_k=3)] == ["notes.txt"]
    assert [p.source for p in retriever.search("sündays", top_k=3)] == ["notes.txt"]


def test_a_search_returns_at_most_top_k_passages(retriever: SqliteFtsRetriever) -> None:
    everything = "deploy tokens rotating scopes requirements installation café read heading"
    assert len(retriever.search(everything, top_k=100)) > 2
    assert len(retriever.search(everything, top_k=2)) == 2


@pytest.mark.parametrize("top_k", [0, -1, 101])
def test_top_k_outside_1_to_100_is_refused(retriever: SqliteFtsRetriever, top_k: int) -> None:
    with pytest.raises(ConfigurationError, match="top_k must be between 1 and 100"):
        retriever.search("tokens", top_k=top_k)


def test_a_query_of_fts5_syntax_is_searched_as_words(tmp_path: Path) -> None:
    write(tmp_path / "docs", "bands.md", "# Bands\n\nRock and roll near the stage.\n")
    write(tmp_path / "docs", "other.md", "# Other\n\nSomething else entirely.\n")
    build_index(tmp_path / "docs", tmp_path / "docs.sqlite")
    with closing(SqliteFtsRetriever(tmp_path / "docs.sqlite")) as retriever:
        for query in ['NEAR(rock "stage', "text:rock", "roll*", "-stage", "NOT AND OR", "^rock +roll"]:
            assert [p.source for p in retriever.search(query, top_k=5)] == ["bands.md"], query


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   \n\t",
        "?!.,;:'\"()[]{}*^-+",
        '"',
        '"""',
        "NEAR(",
        "AND",
        "title:",
        "a" * 100_000,
        "tokens " * 20_000,
        " ".join(f"word{n}" for n in range(10_000)),
        "tok\x00ens \x00",
        "\ud800 tokens \udfff",
        "كيف أدير الرموز؟ tokens",
        "\u202etokens\u202c",
        "👩‍💻 🚀",
    ],
)
def test_a_hostile_query_never_raises(retriever: SqliteFtsRetriever, query: str) -> None:
    assert len(retriever.search(query, top_k=3)) <= 3


def test_a_query_with_nothing_to_search_for_finds_nothing(retriever: SqliteFtsRetriever) -> None:
    assert retriever.search("?!  ...  (*)", top_k=5) == []


@pytest.fixture(scope="module")
def shared_retriever(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteFtsRetriever]:
    """One index for every example Hypothesis tries (a function's fixture would be shared by them anyway)."""
    root = tmp_path_factory.mktemp("shared")
    build_index(write_docs(root / "docs"), root / "docs.sqlite", chunk_chars=100)
    opened = SqliteFtsRetriever(root / "docs.sqlite")
    yield opened
    opened.close()


_FTS5_SYNTAX = st.sampled_from(
    ["AND", "OR", "NOT", "NEAR(", "NEAR/2", '"', "*", "-", ":", "(", ")", "^", "+", "{", "}"]
)
_WORDS = st.sampled_from(["tokens", "rotate", "café", "scope", "title", "text", "source"])


@pytest.mark.slow  # 300 generated queries, each searched in SQLite
@given(
    st.one_of(
        st.text(st.characters(exclude_categories=())),
        st.lists(st.one_of(_FTS5_SYNTAX, _WORDS), max_size=20).map(" ".join),
        st.lists(st.one_of(_FTS5_SYNTAX, _WORDS), max_size=20).map("".join),
    ),
    st.integers(min_value=1, max_value=100),
)
@settings(max_examples=300, deadline=None)
def test_any_text_is_a_query_that_never_raises_nor_returns_more_than_top_k(
    shared_retriever: SqliteFtsRetriever, query: str, top_k: int
) -> None:
    found = shared_retriever.search(query, top_k=top_k)
    assert len(found) <= top_k
    assert all(isinstance(passage, Passage) for passage in found)


def test_searches_from_several_threads_at_once_all_succeed(retriever: SqliteFtsRetriever) -> None:
    queries = ["deploy tokens", "rotating", "café", "requirements", "nothing"] * 40
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda query: retriever.search(query, top_k=2), queries))
    assert [len(found) for found in results[:5]] == [2, 1, 1, 2, 0]
    assert results[5:10] == results[:5]


def test_a_passage_reads_as_a_dict_for_traces(retriever: SqliteFtsRetriever) -> None:
    passage = retriever.search("scopes", top_k=1)[0]
    assert passage.as_dict() == {
        "title": "Deploy tokens › Scopes",
        "text": "A scope is read or write.",
        "source": "ops/tokens.md#scopes",
        "score": passage.score,
    }


def test_the_description_names_the_store_its_file_and_its_passages(docs: Path, tmp_path: Path) -> None:
    summary = build_index(docs, tmp_path / "docs.sqlite")
    with closing(SqliteFtsRetriever(tmp_path / "docs.sqlite")) as retriever:
        assert retriever.description == f"sqlite-fts5 {tmp_path / 'docs.sqlite'} ({summary.passages} passages)"


# --- refusals when opening -----------------------------------------------------------------


def test_a_missing_index_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"^retriever index .*missing.sqlite does not exist$"):
        SqliteFtsRetriever(tmp_path / "missing.sqlite")


def test_a_directory_is_refused_as_an_index(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is not a file"):
        SqliteFtsRetriever(tmp_path)


def test_a_file_that_is_not_sqlite_is_refused_as_an_index(tmp_path: Path) -> None:
    write(tmp_path, "notes.txt", "x" * 2000)
    with pytest.raises(
        ConfigurationError, match=r"^retriever index .* cannot be read as SQLite: file is not a database$"
    ):
        SqliteFtsRetriever(tmp_path / "notes.txt")


def test_a_database_of_another_application_is_refused_as_an_index(tmp_path: Path) -> None:
    with closing(sqlite3.connect(tmp_path / "app.sqlite")) as connection:
        connection.execute("CREATE TABLE passages (text TEXT)")
    with pytest.raises(ConfigurationError, match=r"is not a retriever index \(build one with `prompt-registry index"):
        SqliteFtsRetriever(tmp_path / "app.sqlite")


def test_an_index_of_another_format_version_is_refused(docs: Path, tmp_path: Path) -> None:
    build_index(docs, tmp_path / "docs.sqlite")
    with closing(sqlite3.connect(tmp_path / "docs.sqlite")) as connection, connection:
        connection.execute("UPDATE meta SET value = '2' WHERE key = 'format_version'")
    with pytest.raises(
        ConfigurationError, match="has format version 2, this prompt-registry reads version 1"
    ) as caught:
        SqliteFtsRetriever(tmp_path / "docs.sqlite")
    assert "\n" not in str(caught.value)


def test_the_index_records_what_built_it(docs: Path, tmp_path: Path) -> None:
    build_index(docs, tmp_path / "docs.sqlite", chunk_chars=800)
    with closing(sqlite3.connect(tmp_path / "docs.sqlite")) as connection:
        meta = dict(connection.execute("SELECT key, value FROM meta").fetchall())
    assert meta["format_version"] == "1"
    assert meta["built_by"].startswith("prompt-registry ")
    assert meta["chunk_chars"] == "800"
