"""Every prompt pgrag sends, in one place, each with the paper it follows.

Templates use ``str.format`` fields. Keep them compact: prompt tokens are a cost
that ``pgrag eval`` reports.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReplySchema:
    """The JSON schema of a structured prompt's reply: what ``LLM.structured``
    sends as ``response_format`` (LLMSettings.constrain), so that an endpoint
    that constrains decoding (llama.cpp's grammar, OpenAI's structured outputs)
    can only produce a reply of this shape. ``name`` is the prompt's kind.

    Lists carry a ``maxItems`` (and strings a ``maxLength``) a little above what
    the callers keep: a small model held to a grammar otherwise fills
    ``max_tokens`` with items and leaves the value unclosed."""

    name: str
    schema: dict[str, Any]


def _object(**properties: Any) -> dict[str, Any]:
    """An object with exactly these properties, all required (OpenAI's strict
    mode wants both; a reply may still leave a list empty)."""
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


_TEXT = {"type": "string", "minLength": 1, "maxLength": 200}     # the callers drop empty names


def _names(most: int) -> dict[str, Any]:
    return {"type": "array", "items": _TEXT, "maxItems": most}


_TRIPLES = {"type": "array", "maxItems": 20, "items": {"type": "array", "items": _TEXT, "minItems": 3, "maxItems": 3}}

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

NER_REPLY = ReplySchema("ner", _object(entities=_names(30)))

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
TRIPLES_REPLY = ReplySchema("triples", _object(triples=_TRIPLES))

# -- T2RAG (../shared/papers/t2rag.md) ---------------------------------------------
# Triples are the only state passed between rounds; prompts carry no chain of
# thought. Placeholders are named so that one value fills every triple sharing it.
T2RAG_DECOMPOSE_SYSTEM = ("You break a question into the facts needed to answer it, as (subject, predicate, object) "
                          "triples.")
T2RAG_DECOMPOSE_USER = (
    'Example question: "Who is the child of the performer of Me and Bobby McGee?"\n'
    'Example answer: {{"triples": [["Me and Bobby McGee", "performer", "?performer"], '
    '["?performer", "child", "?child"]]}}\n\n'
    "Question: {question}\n\n"
    "Write the facts needed to answer the question as triples. Mark each unknown with a named "
    "placeholder such as ?person, and reuse the same placeholder wherever the same unknown appears. "
    "Reply with JSON only, in the same format."
)
T2RAG_DECOMPOSE_REPLY = ReplySchema("t2rag_decompose", _object(triples={**_TRIPLES, "minItems": 1, "maxItems": 10}))
T2RAG_RESOLVE_SYSTEM = "You fill unknowns in triples using only the evidence given."
T2RAG_RESOLVE_USER = (
    "Question: {question}\n"
    "Open triples (? marks an unknown):\n{triples}\n"
    "Known: {known}\n\n"
    "Evidence:\n{evidence}\n\n"
    "Give the value of each unknown that the evidence states. Reply with JSON only: "
    '{{"values": {{"?placeholder": "value"}}}}. Leave out unknowns the evidence does not give.'
)
# The placeholders differ per question: any names, each with a string value (not strict for OpenAI).
T2RAG_RESOLVE_REPLY = ReplySchema("t2rag_resolve", _object(values={
    "type": "object", "additionalProperties": {"type": "string", "maxLength": 200}, "maxProperties": 10}))
T2RAG_ANSWER_SYSTEM = "You answer questions briefly from the facts given."
T2RAG_ANSWER_USER = (
    "Question: {question}\nFacts:\n{facts}\n\n"
    "Answer with a short phrase only (a name, date, number, or yes/no)."
)
T2RAG_ANSWER_FORCED_USER = (
    "Question: {question}\nFacts:\n{facts}\nStill open:\n{open}\n\nEvidence:\n{evidence}\n\n"
    "Answer with a short phrase only (a name, date, number, or yes/no)."
)

# ---------------------------------------------------------------------------
# CIRAG (../shared/papers/cirag.md): integration phase (§3.3, Appendix A.2) and
# the cascaded answer (§3.4, Appendix A.3). The paper's figures hold the prompt
# texts as images; these are compact rewrites of what §3.3-3.4 describe.
# ---------------------------------------------------------------------------

# The integrator: keeps the core triples of this round's candidates given the
# question and the history, and writes the next-hop query (or none).
CIRAG_INTEGRATE_SYSTEM = (
    "You gather evidence for a multi-hop question. Given the question, the facts kept in earlier rounds "
    "and numbered candidate facts, keep the candidates needed to answer and ask for what is still missing."
)
CIRAG_INTEGRATE_USER = (
    "Question: {question}\n\n"
    "Earlier rounds:\n{history}\n\n"
    "Candidate facts (round {round}, query: {query}):\n{candidates}\n\n"
    'Reply with JSON only: {{"thought": "<one or two sentences>", "core": [<numbers of the facts to keep>], '
    '"next_query": "<a question for the missing fact, or null if the facts suffice>"}}'
)
CIRAG_INTEGRATE_REPLY = ReplySchema("cirag_integrate", _object(
    thought={"type": "string", "maxLength": 400},
    core={"type": "array", "items": {"type": "integer"}, "maxItems": 20},
    next_query={"type": ["string", "null"], "maxLength": 300}))
CIRAG_NO_HISTORY = "(none)"

# The cascade: one prompt, evidence at a granularity (triples, sentences or
# passages); a refusal escalates to the next one.
CIRAG_ANSWER_SYSTEM = (
    "Answer the question from the evidence only. If the evidence is not enough, reply exactly: Unanswerable"
)
CIRAG_ANSWER_USER = (
    "Evidence ({granularity}):\n{evidence}\n\n"
    "Question: {question}\n"
    "Reply with the answer only (a short phrase), or Unanswerable."
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
THREADRAG_ENTITIES_REPLY = ReplySchema("threadrag_entities", _object(entities=_names(10)))
# {"sufficient": true} alone is what the prompt shows; held to the schema the
# reply carries an empty "missing" too (OpenAI's strict mode requires every property).
VERDICT = _object(sufficient={"type": "boolean"}, missing=_names(6))
THREADRAG_SUFFICIENT_REPLY = ReplySchema("threadrag_sufficient", VERDICT)
THREADRAG_SUFFICIENT = (
    "Evidence:\n{context}\n\nQuestion: {question}\n\n"
    "Does the evidence contain every fact needed to answer the question? Reply with JSON only: "
    '{{"sufficient": true}} or {{"sufficient": false, "missing": ["name of a person, place or work to look up"]}}'
)
THREADRAG_ANSWER = (
    "Evidence:\n{context}\n\nQuestion: {question}\n\n"
    "Answer the question from the evidence with a short phrase only (a name, date, yes or no), no explanation."
)


# ---------------------------------------------------------------------------
# TIGRAG's reader (pgrag's own, `tigrag-reader`): after a hop, which names the
# next hop should look up, in ThreadRAG's sufficiency format (an LLM-free
# TIGRAG takes them from the NER of the hop's best passage instead).
# ---------------------------------------------------------------------------

TIGRAG_READER = (
    "Passages:\n{context}\n\nQuestion: {question}\n\n"
    "Do the passages contain every fact needed to answer the question? If not, name what they say that "
    "the next search should look up. Reply with JSON only: "
    '{{"sufficient": true}} or {{"sufficient": false, "missing": ["name of a person, place or work to look up"]}}'
)

TIGRAG_READER_REPLY = ReplySchema("tigrag_reader", VERDICT)


# Every structured prompt's reply schema, by kind (the kinds of KINDS below that
# LLM.structured sends; the others are answered in free text).
SCHEMAS: dict[str, ReplySchema] = {r.name: r for r in (
    NER_REPLY, TRIPLES_REPLY, T2RAG_DECOMPOSE_REPLY, T2RAG_RESOLVE_REPLY, CIRAG_INTEGRATE_REPLY,
    THREADRAG_ENTITIES_REPLY, THREADRAG_SUFFICIENT_REPLY, TIGRAG_READER_REPLY)}


# ---------------------------------------------------------------------------
# Identification: which of the prompts above a chat request is. Used by the
# oracle reader (pgrag.bench.oracle) to answer each prompt in its expected format;
# the templates themselves are the patterns, so a changed prompt is recognised
# as long as its fields stay.
# ---------------------------------------------------------------------------

# kind -> (system message or None, user template)
KINDS: dict[str, tuple[str | None, str]] = {
    "ner": (NER_SYSTEM, NER_USER),
    "triples": (TRIPLES_SYSTEM, TRIPLES_USER),
    "t2rag_decompose": (T2RAG_DECOMPOSE_SYSTEM, T2RAG_DECOMPOSE_USER),
    "t2rag_resolve": (T2RAG_RESOLVE_SYSTEM, T2RAG_RESOLVE_USER),
    "t2rag_answer": (T2RAG_ANSWER_SYSTEM, T2RAG_ANSWER_USER),
    "t2rag_answer_forced": (T2RAG_ANSWER_SYSTEM, T2RAG_ANSWER_FORCED_USER),
    "cirag_integrate": (CIRAG_INTEGRATE_SYSTEM, CIRAG_INTEGRATE_USER),
    "cirag_answer": (CIRAG_ANSWER_SYSTEM, CIRAG_ANSWER_USER),
    "threadrag_entities": (None, THREADRAG_ENTITIES),
    "threadrag_sufficient": (None, THREADRAG_SUFFICIENT),
    "threadrag_answer": (None, THREADRAG_ANSWER),
    "tigrag_reader": (None, TIGRAG_READER),
}


def _pattern(template: str) -> "re.Pattern[str]":
    """A template as a regular expression: its literal text exactly, each field a
    named lazy group (a field used twice must hold the same text twice)."""
    parts: list[str] = []
    seen: set[str] = set()
    for literal, name, _spec, _conv in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if name is not None:
            parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>.*?)")
            seen.add(name)
    return re.compile("".join(parts), re.DOTALL)


_PATTERNS = {kind: (system, _pattern(user)) for kind, (system, user) in KINDS.items()}


def identify(messages: "list[dict[str, str]]") -> "tuple[str, dict[str, str]] | None":
    """``(kind, fields)`` for a chat request built from one of the prompts above
    (``fields`` are the template's fields as filled in), or None. A request that
    repairs an earlier reply (``REPAIR`` appended) is the prompt it repairs."""
    system = next((m["content"] for m in messages if m.get("role") == "system"), None)
    user = next((m["content"] for m in messages if m.get("role") == "user"), None)
    if user is None:
        return None
    found: list[tuple[int, str, dict[str, str]]] = []
    for kind, (want_system, pattern) in _PATTERNS.items():
        match = pattern.fullmatch(user) if want_system == system else None
        if match:
            # A field can swallow another template's literal text (the forced
            # T2RAG answer also matches the plain one): the match that leaves
            # the least text to its fields is the template that was used.
            found.append((sum(len(v) for v in match.groupdict().values()), kind, match.groupdict()))
    if not found:
        return None
    _, kind, fields = min(found, key=lambda f: f[0])
    return kind, fields
