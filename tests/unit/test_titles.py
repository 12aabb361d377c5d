"""Title linking (pgrag.titles): which documents a question or a name names."""

from __future__ import annotations

from pgrag.titles import TitleIndex, key

INDEX = TitleIndex([
    (1, "Dark River (2017 film)", [10]),
    (2, "Dark River (1990 film)", [20]),
    (3, "Airheads", [30]),
    (4, "Lothair II", [40, 41]),
    (5, "Stranger", [50]),
    (6, "Talk About a Stranger", [60]),
    (7, "William Duncan (actor)", [70]),
    (8, "Love, Honor and Oh-Baby!", [80]),
    (9, "Airheads (band)", [90]),
])


def linked(text: str) -> list[tuple[str, bool]]:
    return [(link.title, link.exact) for link in INDEX.link(text)]


def test_key_is_the_lower_cased_words():
    assert key("Love, Honor And Oh-Baby!") == key("love honor and oh baby") == "love honor and oh baby"
    assert key("Lothair Ii's") == "lothair ii s"


def test_a_title_is_linked_once_with_its_chunks():
    links = INDEX.link("When did Lothair Ii's mother die?")
    assert [(link.title, link.chunk_ids, link.first, link.last) for link in links] == [
        ("Lothair II", (40, 41), 2, 3)]
    assert linked("Which film came out first, Love, Honor And Oh-Baby! or Airheads?") == [
        ("Love, Honor and Oh-Baby!", True), ("Airheads", True)]


def test_the_title_with_its_note_wins_over_the_same_name_without():
    assert linked("Which film came out first, Dark River (2017 Film) or Airheads?") == [
        ("Dark River (2017 film)", True), ("Airheads", True)]
    # a title without a note wins over the same name with one ...
    assert linked("Who made Airheads?") == [("Airheads", True)]
    # ... and without a note in the question, every document of that name is linked
    assert linked("Where is Dark River?") == [("Dark River (2017 film)", False), ("Dark River (1990 film)", False)]


def test_the_longest_run_wins_and_lower_case_words_link_nothing():
    assert linked("Where does the director of film Talk About A Stranger work at?") == [
        ("Talk About a Stranger", True)]
    assert linked("he met a stranger") == []
    assert linked("he met a Stranger") == [("Stranger", True)]


def test_names_link_whole():
    links = INDEX.named(["William Duncan", "Airheads", "Stranger Things", "nobody"])
    assert [(link.title, link.first) for link in links] == [("William Duncan (actor)", 0), ("Airheads", 1)]
