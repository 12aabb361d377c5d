from pgrag.text import MAX_PIECE, chunk_search_text, content_hash, paragraph_spans, sentence_windows


def test_sentence_windows_follow_tigrag_stride():
    # s=6, o=2 -> stride 4: (0..5), (4..9), (8..11)
    assert sentence_windows(12, 6, 2) == [(0, 5), (4, 9), (8, 11)]


def test_sentence_windows_short_document_is_one_chunk():
    assert sentence_windows(3, 6, 2) == [(0, 2)]
    assert sentence_windows(6, 6, 2) == [(0, 5)]


def test_sentence_windows_never_emit_a_window_inside_the_previous_one():
    assert sentence_windows(7, 6, 2) == [(0, 5), (4, 6)]
    assert sentence_windows(0, 6, 2) == []


def test_every_sentence_is_covered():
    for n in range(1, 40):
        covered = set()
        for first, last in sentence_windows(n, 6, 2):
            covered.update(range(first, last + 1))
        assert covered == set(range(n))


def test_paragraph_spans_skip_blank_lines_and_trim():
    text = "  First para.\nstill first.\n\n\n  Second.  \n \n"
    spans = list(paragraph_spans(text))
    assert [text[s:e] for s, e in spans] == ["First para.\nstill first.", "Second."]


def test_paragraph_spans_cut_huge_paragraphs_at_whitespace():
    text = ("word " * (MAX_PIECE // 2)).strip()
    spans = list(paragraph_spans(text))
    assert len(spans) >= 2
    assert all(e - s <= MAX_PIECE for s, e in spans)
    assert "".join(text[s:e] for s, e in spans).replace(" ", "") == text.replace(" ", "")


def test_content_hash_and_search_text():
    assert content_hash("T", "body") == content_hash("T", "body")
    assert content_hash("T", "body") != content_hash("T", "body2")
    assert chunk_search_text("", "x") == "x"
    assert chunk_search_text("Title", "x") == "Title\nx"
