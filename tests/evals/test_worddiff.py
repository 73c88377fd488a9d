"""The word diff of two outputs: exact pieces, bounded work."""

from __future__ import annotations

from registry.evals.reports.worddiff import Piece, word_diff


def test_changed_words_are_deleted_on_base_and_inserted_on_head_and_the_pieces_are_the_texts() -> None:
    diff = word_diff("Your refund is on its way.", "Your refund was sent.")
    assert diff.base == (Piece("Your refund", "same"), Piece(" is on its way", "deleted"), Piece(".", "same"))
    assert diff.head == (Piece("Your refund", "same"), Piece(" was sent", "inserted"), Piece(".", "same"))
    assert not diff.cut


def test_the_word_diff_compares_a_bounded_number_of_words_and_shows_the_rest() -> None:
    before, after = "same " * 1500 + "old", "same " * 1500 + "new"  # 1,501 words each
    diff = word_diff(before, after)
    assert diff.cut
    assert diff.base[-1] == Piece(" same" * 500 + " old", "uncompared")
    assert "".join(piece.text for piece in diff.base) == before
    assert "".join(piece.text for piece in diff.head) == after
