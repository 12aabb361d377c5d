"""Every prompt pgrag sends, in one place, each with the paper it follows.

Templates use ``str.format`` fields. Keep them compact: prompt tokens are a cost
that ``pgrag eval`` reports.
"""

from __future__ import annotations

# Sent after a structured reply that did not parse (pgrag's own).
REPAIR = (
    "Your previous reply could not be used: {error}. Reply again with only the JSON value, "
    "no explanation and no code fences."
)

# Named entity recognition before OpenIE, as in HippoRAG's two-step extraction
# (Gutiérrez et al., 2024), which T2RAG (../shared/papers/t2rag.md) reuses for
# its offline proposition index.
NER_SYSTEM = "You extract named entities from a passage."
# One worked example, as HippoRAG's prompts have: small models follow a shown
# format far better than a described one.
NER_USER = (
    'Example passage: "Marie Curie was born in Warsaw in 1867."\n'
    'Example answer: {{"entities": ["Marie Curie", "Warsaw", "1867"]}}\n\n'
    "Passage:\n{passage}\n\n"
    "List the named entities of the passage (people, places, organisations, works, dates) as JSON "
    'in the same format: {{"entities": ["...", "..."]}}'
)

# OpenIE conditioned on the entities (HippoRAG / T2RAG). Each triple should name
# at least one entity and resolve pronouns to their names.
TRIPLES_SYSTEM = "You turn a passage into (subject, predicate, object) triples."
TRIPLES_USER = (
    'Example passage: "Marie Curie was born in Warsaw. She won the Nobel Prize."\n'
    'Example answer: {{"triples": [["Marie Curie", "was born in", "Warsaw"], '
    '["Marie Curie", "won", "the Nobel Prize"]]}}\n\n'
    "Passage:\n{passage}\n\nNamed entities: {entities}\n\n"
    "Write the facts of the passage as triples. Each triple contains at least one of the named "
    "entities; replace pronouns by the names they refer to; keep each element short. Reply with JSON "
    'in the same format: {{"triples": [["subject", "predicate", "object"], ...]}}'
)


# ---------------------------------------------------------------------------
# ThreadRAG (../shared/papers/threadrag.md): entity anchors (its App. F.1), the
# information-sufficiency discriminator (App. F.2) and answer synthesis.
# ---------------------------------------------------------------------------

THREADRAG_ENTITIES = (
    'Example question: "What sport does the founder of Google play?"\n'
    'Example answer: {{"entities": ["Google", "Larry Page"]}}\n\n'
    "Question: {question}\n\n"
    "List every entity needed to answer the question (names of people, places, works, organisations) "
    'as JSON in the same format: {{"entities": ["..."]}}'
)
THREADRAG_SUFFICIENT = (
    "Evidence:\n{context}\n\nQuestion: {question}\n\n"
    "Does the evidence contain every fact needed to answer the question? Reply with JSON only: "
    '{{"sufficient": true}} or {{"sufficient": false, "missing": ["name of a person, place or work to look up"]}}'
)
THREADRAG_ANSWER = (
    "Evidence:\n{context}\n\nQuestion: {question}\n\n"
    "Answer the question from the evidence with a short phrase only (a name, date, yes or no), no explanation."
)
