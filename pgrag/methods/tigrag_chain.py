"""TIGRAG's chain levers (issue 44): the next hop found from the passages of the
previous hop, not only from titles.

- ``bridges``: a hop's entities minus those the question already names. An
  entity the question names is not a bridge: it leads back to the passages the
  first hop already found, and its rerank vector (question ⊕ entity) adds
  nothing the question's own vector lacks.
- ``mentions`` (on by default, with chain support): entity-to-passage links
  from the named entities pgrag stores at ingest (``pgrag.chunk_entity``): the
  chunks that mention a bridge entity of a hop's best chunks join the next
  hop's ranking. A name that more than ``mention_max`` chunks mention
  ("American", "London") links nothing: a frequent name is a weak bridge, and
  following it would flood the pool.
- chain support: a mention-linked chunk gains ``chain_weight`` × the score of
  the chunk whose entity it mentions, over the hop's best score. A passage that
  completes a chain started by a well-ranked passage then ranks with its chain.
- ``remainder``: a mention-linked chunk is also compared with the question's
  remaining part joined to the bridge entity: the question's words that its
  source chunk does not contain, then the entity ("Who is the spouse of the
  person who voices Jarvis in the Avengers Age of Ultron?" and Paul Bettany's
  passage leave "Who spouse person who voices Jarvis Paul Bettany"). The part of the question
  that the source passage already answers no longer pulls the next hop back to
  passages like the source.
- ``text_titles``: the titles of the corpus's documents that a driving chunk's
  text names exactly (``pgrag.titles.TitleIndex.link``, with the title's note or
  of a title without one; its own document's title excluded) join the chunk's
  entities. spaCy's small model misses names that are titles of the corpus ("the
  second son of Emperor Lothair I and Ermengarde of Tours" gives it neither),
  and a hop cannot follow a bridge it never sees. A name matched without its
  note ("David Elliot" for "David Elliot (footballer)") is left out: such
  namesakes took top-2 places on 2Wiki.
- ``context_shares``, ``best_bridges`` (on by default): a bridge's share of the
  question's words in the driving chunks' sentence that names it ("George
  Peppard plays Paul Varjak" for "the actor who plays Paul"): its weight in the
  next hop's rerank, and which bridges get a vector at all.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..titles import key, words

if TYPE_CHECKING:
    from ..context import Context
    from ..index.postings import Postings
    from ..results import Trace
    from ..titles import TitleIndex


def named_in(question: str) -> Callable[[str], bool]:
    """A test of whether a name's words occur, in order and whole, in ``question``."""
    text = f" {key(question)} "

    def test(name: str) -> bool:
        k = key(name)
        return bool(k) and f" {k} " in text
    return test


def with_titles(entities: list[str], titles: "TitleIndex", texts: dict[int, tuple[str, str]]) -> list[str]:
    """``entities``, then the titles the chunks' ``texts`` ((title, text) by chunk) name
    that are not among them, each chunk's own title excluded."""
    seen = {key(e) for e in entities}
    out = list(entities)
    for own, text in texts.values():
        seen.add(key(own))
        for link in titles.link(text):
            if link.exact and key(link.title) not in seen:
                seen.add(key(link.title))
                out.append(link.title)
    return out


def bridges(question: str, entities: list[str]) -> list[str]:
    """``entities`` without those the question names (order kept)."""
    named = named_in(question)
    return [e for e in entities if not named(e)]


@dataclass
class Chains:
    """The chunks a hop's bridge entities link to: each one's chain support
    (``support``) and the (entity, source chunk) pairs that link it (``via``)."""

    support: dict[int, float] = field(default_factory=dict)
    via: dict[int, set[tuple[str, int]]] = field(default_factory=dict)
    source_score: dict[int, float] = field(default_factory=dict)     # source chunk -> its score in its hop


# Words a question shares with any sentence; they say nothing about which name is its bridge.
_FUNCTION_WORDS = frozenset("""a an and are as at be by did does for from had has have he her his how in is it its
of on or she that the their they this to was were what when where which who whom whose why with""".split())
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def context_shares(question: str, entities: list[str], texts: dict[int, tuple[str, str]]) -> list[float]:
    """For each entity, the largest share of the question's words (less its own
    and function words) in one sentence of ``texts`` that names it; 0 where none does."""
    asked = {w.lower() for w in words(question)} - _FUNCTION_WORDS
    sentences = [set(key(s).split()) for _, text in texts.values() for s in _SENTENCE_END.split(text)]
    out = []
    for entity in entities:
        own = key(entity).split()
        wanted = asked - set(own)
        best = 0.0
        if own and wanted:
            for held in sentences:
                if all(w in held for w in own):   # the name's words, not necessarily in order
                    best = max(best, len(wanted & held) / len(wanted))
        out.append(best)
    return out


def best_bridges(question: str, entities: list[str], texts: dict[int, tuple[str, str]],
                 limit: int) -> tuple[list[str], list[float]]:
    """The ``limit`` entities (0: all) with the largest context shares, in their
    order (a tie keeps the earlier), and their shares."""
    shares = context_shares(question, entities, texts)
    if limit and len(entities) > limit:
        kept = sorted(sorted(range(len(entities)), key=lambda i: -shares[i])[:limit])
        return [entities[i] for i in kept], [shares[i] for i in kept]
    return entities, shares


def remainder(question: str, source_text: str) -> str:
    """The question's words that ``source_text`` does not contain, in order."""
    held = {w.lower() for w in words(source_text)}
    return " ".join(w for w in words(question) if w.lower() not in held)


def canonical(entity: str) -> str:
    """A name's lookup form: lower-cased, single spaces, without a leading "the"
    (spaCy keeps it in "the Sazerac Company" but not in "Sazerac Company")."""
    name = " ".join(entity.split()).lower()
    return name[4:] if name.startswith("the ") else name


def pair_cosines(ctx: "Context", postings: "Postings", question: str, chains: Chains, remainder_only: bool,
                 trace: "Trace") -> dict[int, tuple[float, int]]:
    """Each mention-linked chunk's best cosine, and the source chunk it came
    through, over the (entity, source) pairs that link it: one embedding a pair,
    of ``remainder(question, source) + entity`` (``remainder_only``) or of
    ``question + entity``."""
    pairs = sorted({pair for via in chains.via.values() for pair in via})
    if not pairs:
        return {}
    texts = ctx.chunk_texts(sorted({source for _, source in pairs})) if remainder_only else {}
    rest = {source: remainder(question, " ".join(texts[source])) for source in texts}
    vectors = ctx.encode([f"{rest.get(source, question)} {entity}" for entity, source in pairs], trace)
    out: dict[int, tuple[float, int]] = {}
    for vector, pair in zip(vectors, pairs):
        chunks = [c for c, via in chains.via.items() if pair in via]
        for c, cos in postings.cosines(chunks, [vector]).items():
            if c not in out or cos > out[c][0]:
                out[c] = (cos, pair[1])
    return out


def follow_scores(chains: Chains, cosines: dict[int, tuple[float, int]], follow: int) -> dict[int, float]:
    """Chain following: each source chunk's ``follow`` best mention-linked chunks
    (by ``cosines``) ranked right behind it, each a thousandth below the one before."""
    by_source: dict[int, list[tuple[float, int]]] = {}
    for c, (cos, source) in cosines.items():
        by_source.setdefault(source, []).append((cos, c))
    out: dict[int, float] = {}
    for source, linked in by_source.items():
        for i, (_, c) in enumerate(sorted(linked, key=lambda x: (-x[0], x[1]))[:follow]):
            score = chains.source_score[source] - 1e-3 * (i + 1)
            out[c] = max(out.get(c, score), score)
    return out


def mention_links(ctx: "Context", postings: "Postings", sources: list[tuple[int, float]],
                  entities_of: dict[int, list[str]], question: str, mention_max: int,
                  trace: "Trace", hop: int) -> Chains:
    """The chunks that mention a bridge entity of the ``sources`` chunks
    (chunk id, score), each with its chain's support: the best score, over the
    best source's, of a source chunk whose entity it mentions. The sources
    themselves are left out."""
    t0 = time.perf_counter()
    named = named_in(question)
    top = max((score for _, score in sources), default=0.0) or 1.0
    support: dict[str, float] = {}
    origin: dict[str, tuple[str, int]] = {}     # name -> (entity as written, its best source)
    for chunk_id, score in sources:
        for entity in entities_of.get(chunk_id, ()):
            name = canonical(entity)
            if name and not named(name) and score / top > support.get(name, -1.0):
                support[name] = score / top
                origin[name] = (" ".join(entity.split()), chunk_id)
    chains = Chains(source_score=dict(sources))
    if not support:
        return chains
    rows = ctx.db.fetchall("entity_mentions", {"corpus_id": ctx.id,
                                               "names": [*support, *(f"the {n}" for n in support)]})
    mentioned: dict[str, set[int]] = {}
    for name, chunk_ids in rows:
        mentioned.setdefault(canonical(name), set()).update(chunk_ids)
    own = {c for c, _ in sources}
    followed, skipped = [], []
    for name, chunk_ids in sorted(mentioned.items()):
        if name not in support:
            continue
        if len(chunk_ids) > mention_max:
            skipped.append(name)
            continue
        followed.append(name)
        ids = np.asarray(sorted(chunk_ids), dtype=np.int64)
        for c in ids[postings.held(ids)].tolist():
            if c not in own:
                chains.support[c] = max(chains.support.get(c, 0.0), support[name])
                chains.via.setdefault(c, set()).add(origin[name])
    trace.time("mentions", t0)
    trace.step("mentions", hop=hop, followed=followed, too_frequent=skipped,
               chunks=sorted(chains.support)[:50], linked=len(chains.support))
    return chains
