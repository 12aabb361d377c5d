"""The pure parts of TIGRAG's chain levers (pgrag.methods.tigrag_chain), hand-checked."""

from __future__ import annotations

import dataclasses

import pytest

from pgrag.methods.tigrag import PRESETS, TigragSettings, _lead, _merge, _Scored
from pgrag.methods.tigrag_chain import (
    Chains,
    best_bridges,
    bridges,
    canonical,
    context_shares,
    follow_scores,
    named_in,
    remainder,
    with_titles,
)
from pgrag.titles import TitleIndex


def test_remainder_keeps_the_question_words_the_passage_lacks():
    passage = "Lothair II (835 - 869) was the son of Emperor Lothair I and Ermengarde of Tours."
    assert remainder("When did Lothair II's mother die?", passage) == "When did s mother die"
    # case-insensitive, whole words only: "Tours" goes, "tour" would stay
    assert remainder("Which tour visited Tours?", "Tours is a city.") == "Which tour visited"
    assert remainder("Who?", "") == "Who"
    assert remainder("", "anything") == ""


def test_bridges_drop_the_entities_the_question_names():
    question = "Who is the spouse of the person who voices Jarvis in the Avengers Age of Ultron?"
    found = ["Avengers", "Ultron", "Paul Bettany", "Age of Ultron", "Jarvis Cocker", "the Avengers"]
    assert bridges(question, found) == ["Paul Bettany", "Jarvis Cocker"]
    named = named_in(question)
    assert named("age of ultron") and not named("Ultron Age") and not named("")


def test_context_shares_count_the_question_words_beside_each_name():
    question = "Who is the mother of the king who founded Kelso Abbey?"
    # asked: mother, king, founded, kelso, abbey (function words out)
    texts = {1: ("Kelso Abbey", "Kelso Abbey was founded by King David I. His mother Margaret was a saint! "
                                "Queen Matilda was his wife.")}
    shares = context_shares(question, ["David I", "Margaret", "Matilda", "Kelso Abbey", "Lothair"], texts)
    # David I: founded, kelso, abbey, king of 5; Margaret: mother of 5; Kelso Abbey: founded, king of
    # the 3 not its own; Matilda's sentence holds none; Lothair is named nowhere
    assert shares == [pytest.approx(4 / 5), pytest.approx(1 / 5), 0.0, pytest.approx(2 / 3), 0.0]
    assert context_shares("Who?", ["Margaret"], texts) == [0.0]     # no word left to share


def test_best_bridges_keep_the_best_shares_in_their_order():
    question = "Who is the mother of the king who founded Kelso Abbey?"
    texts = {1: ("Kelso Abbey", "Kelso Abbey was founded by King David I. His mother Margaret was a saint.")}
    names = ["Lothair", "Margaret", "Boso", "David I"]
    kept, shares = best_bridges(question, names, texts, 2)
    assert kept == ["Margaret", "David I"] and shares == [pytest.approx(0.2), pytest.approx(0.8)]
    # a tie keeps the earlier; 0 keeps all
    assert best_bridges(question, names, texts, 3)[0] == ["Lothair", "Margaret", "David I"]
    assert best_bridges(question, names, texts, 0)[0] == names


def test_canonical_drops_a_leading_article_only():
    assert canonical("the  Sazerac   Company") == "sazerac company"
    assert canonical("The Hague") == "hague"
    assert canonical("Theodore Roosevelt") == "theodore roosevelt"


def test_follow_scores_rank_each_sources_best_links_right_behind_it():
    chains = Chains(source_score={1: 0.9, 2: 0.7})
    cosines = {10: (0.5, 1), 11: (0.6, 1), 12: (0.4, 2), 13: (0.3, 2)}
    assert follow_scores(chains, cosines, 1) == {11: pytest.approx(0.899), 12: pytest.approx(0.699)}
    two = follow_scores(chains, cosines, 2)
    assert two == {11: pytest.approx(0.899), 10: pytest.approx(0.898),
                   12: pytest.approx(0.699), 13: pytest.approx(0.698)}


def test_the_default_turns_on_the_kept_levers_and_the_paper_keeps_them_off():
    d = PRESETS["tigrag"]
    assert d.hop_remainder == "replace"
    for name in ("tigrag-paper", "tigrag-no-bm25", "tigrag-degree", "tigrag-no-rerank"):
        s = PRESETS[name]
        assert (s.hop_remainder, s.mentions, s.bridges, s.chain_weight, s.chain_follow, s.fresh_sources) == (
            "off", False, False, 0.0, 0, False), name
        # the paper's two hops, no lead, the bridges' context and the hops' normalisation off
        assert (s.hops, s.remainder_stop, s.lead, s.context_weight, s.bridge_limit, s.hop_normalise) == (
            2, 0, 0, 0.0, 0, False), name
    # the chains (mention links with chain support, a third hop while two terms remain, the lead) are on
    assert (d.mentions, d.chain_weight, d.hops, d.remainder_stop, d.lead) == (True, 0.1, 3, 2, 2)
    assert d.lead_named     # the documents the question names by title lead first
    assert (d.context_weight, d.bridge_limit, d.hop_normalise) == (0.1, 8, True)
    # the other chain levers stay off
    assert not (d.bridges or d.remainder or d.chain_follow or d.fresh_sources)
    with pytest.raises(ValueError, match="bridge_limit"):
        dataclasses.replace(d, bridge_limit=-1)
    with pytest.raises(ValueError, match="lead"):
        dataclasses.replace(d, lead=-1)
    with pytest.raises(ValueError, match="hop_remainder"):
        TigragSettings(hop_remainder="on")
    with pytest.raises(ValueError, match="mention_sources"):
        dataclasses.replace(d, mention_sources=0)


def _scored(chunk_id: int, hop: int, score: float, plain: float | None = None) -> _Scored:
    return _Scored(chunk_id=chunk_id, rho=0.0, cosine=None, score=score, hop=hop,
                   plain=score if plain is None else plain)


def _own(chunk_ids: list[int]) -> dict[int, object]:
    return {c: c for c in chunk_ids}


def test_the_lead_is_the_first_two_hops_best_without_chain_support():
    """Hand-checked. Chunk 3 tops hop 2 only by its chain support (0.5 without it);
    chunk 5 tops hop 3. Merged, they tie with the hops' direct evidence at 1; the
    lead puts the first two hops' best by their own scores first: chunk 1 (hop 1)
    and chunk 4, whose 0.9 is hop 2's best without support."""
    rankings = [[_scored(1, 1, 1.0), _scored(2, 1, 0.8)],
                [_scored(3, 2, 1.0, plain=0.5), _scored(4, 2, 0.9)],
                [_scored(5, 3, 1.0)]]
    settings = PRESETS["tigrag"]
    assert _lead(rankings[:2], settings, _own) == [1, 4]
    assert _lead(rankings[:2], dataclasses.replace(settings, lead=3), _own) == [1, 4, 2]
    assert _lead(rankings[:2], dataclasses.replace(settings, lead=0), _own) == []
    # merged by score, chain support and the third hop would take places 2 and 3
    assert [s.chunk_id for s in _merge(rankings, normalise=True)] == [1, 3, 5, 4, 2]


def test_the_lead_takes_one_chunk_a_source():
    """Hand-checked, the rankings above. By their own scores, over each hop's best,
    the order is 1 (1.0, hop 1), 4 (0.9 / 0.9, hop 2), 2 (0.8), 3 (0.5 / 0.9).
    When chunks 1 and 4 are paragraphs of one article (one title), the second
    place goes to chunk 2, the best of another source, and chunk 4 does not lead."""
    rankings = [[_scored(1, 1, 1.0), _scored(2, 1, 0.8)],
                [_scored(3, 2, 1.0, plain=0.5), _scored(4, 2, 0.9)]]
    titles = {1: "Africa", 4: "Africa", 2: "Near East", 3: "Asia"}

    def source(chunk_ids: list[int]) -> dict[int, object]:
        return {c: titles[c] for c in chunk_ids}

    settings = PRESETS["tigrag"]
    assert _lead(rankings, settings, source) == [1, 2]
    assert _lead(rankings, dataclasses.replace(settings, lead=3), source) == [1, 2, 3]
    # the second source may come after many chunks of the first (the sources are read in blocks)
    many = [[_scored(c, 1, 1.0 - c / 100) for c in range(1, 41)]]
    one_article = {c: "Africa" if c < 35 else "Near East" for c in range(1, 41)}
    assert _lead(many, settings, lambda ids: {c: one_article[c] for c in ids}) == [1, 35]


def test_the_documents_the_question_names_lead_first():
    """Hand-checked, the rankings above: by their own scores 1 (1.0), 4 (0.9 / 0.9),
    2 (0.8), 3 (0.5 / 0.9 = 0.56). The chunks of the documents the question names
    by title lead before every other, best first; then the others by score. Two
    named chunks of one source take one place."""
    rankings = [[_scored(1, 1, 1.0), _scored(2, 1, 0.8)],
                [_scored(3, 2, 1.0, plain=0.5), _scored(4, 2, 0.9)]]
    settings = PRESETS["tigrag"]
    assert _lead(rankings, settings, _own, {2}) == [2, 1]
    assert _lead(rankings, settings, _own, {3, 2}) == [2, 3]
    assert _lead(rankings, dataclasses.replace(settings, lead=3), _own, {3}) == [3, 1, 4]
    assert _lead(rankings, settings, lambda ids: {c: "one" if c in (2, 3) else c for c in ids}, {2, 3}) == [2, 1]
    assert _lead(rankings, settings, _own) == [1, 4]


def test_with_titles_adds_the_titles_a_text_names_exactly_after_the_entities():
    titles = TitleIndex([(1, "Lothair II", [10]), (2, "Ermengarde of Tours", [20]), (3, "Teutberga", [30]),
                         (4, "Dark River (1990 film)", [40]), (5, "Dark River (2017 film)", [50])])
    texts = {10: ("Lothair II", "Lothair II was the son of Ermengarde of Tours. He married Teutberga. "
                                "He never saw Dark River, nor Dark River (2017 Film).")}
    # Teutberga is an entity already (by its key); the chunk's own title is no bridge; "Dark
    # River" alone names two films without their notes, and is left out
    assert with_titles(["TEUTBERGA", "Boso"], titles, texts) == [
        "TEUTBERGA", "Boso", "Ermengarde of Tours", "Dark River (2017 film)"]
    assert with_titles(["Boso"], titles, {}) == ["Boso"]


def test_text_titles_are_on_in_the_default_and_off_in_the_paper():
    assert PRESETS["tigrag"].text_titles and not PRESETS["tigrag"].text_title_links
    assert not PRESETS["tigrag-paper"].text_titles
