"""An oracle reader: an OpenAI-compatible chat server that answers the prompts
of T2RAG, CIRAG, ThreadRAG and TIGRAG's reader as an ideal reader of each
prompt would, from the gold record of the question (2WikiMultiHopQA's ``evidences`` triples and
``answer``, or triples derived from MuSiQue's ``question_decomposition``, see
``gold``, with its ``answer_aliases``). ``pgrag eval --oracle`` starts one on
127.0.0.1 and points the answering methods at it, so their loops (parsers, state
machines, stop rules) run as with a real model and the figures measure the
loop's retrieval under ideal reasoning: an upper bound that separates retrieval
design from model quality.

What the oracle may use:

- the gold record of the question, found by the question text of the prompt
  (every prompt of the three methods carries it);
- the prompt, and nothing else: it never reads the corpus.

How it reads. Each gold triple (subject, relation, object) is *supported* by
a prompt when one line of the prompt's evidence names both its subject and its
object (normalised match, SQuAD normalisation; an entity may have several
surface forms: the gold ones, the question's own wording of a question entity).
An entity is *known* when the question names it, or it ends a supported triple
whose other end is known (a fixed point, so a two-hop chain needs both hops in
the evidence). Then:

- decomposition (T2RAG): the gold triples, the entities the question does not
  name replaced by shared named placeholders (``?mother``);
- resolution (T2RAG): the placeholders whose entity became known from the
  evidence lines; the others are left out (not known yet);
- integration (CIRAG): the candidates that support a triple with a known end are
  core; the next query asks for the first unsupported triple with a known end
  ("What is the <relation> of <entity>?"), or none when every triple is
  supported;
- sufficiency (ThreadRAG): sufficient when every triple is supported, else the
  known ends of the unsupported triples are "missing";
- entities (ThreadRAG): the question's entities;
- TIGRAG's reader (``tigrag-reader``): the sufficiency reply above, its
  "missing" the names the next hop looks up;
- final answers: the gold answer when every triple is supported by the
  evidence of the prompt (an accepted alias when only the alias is there),
  else the method's refusal ("Unanswerable" for CIRAG, "unknown" otherwise).

The leak guard: every value a reply carries (an entity, an answer) must occur
in the prompt (normalised), yes/no excepted; a reply that would break this
raises ``OracleLeak`` instead of being sent. Relations and placeholder names
are the reader's vocabulary, not values.

The oracle keeps a log of what each prompt contained (which gold triples it
supported, which gold titles it mentioned) so that a failure can be traced to
where the loop lost the second hop.

Each part has its module: ``gold`` (the records, MuSiQue's derived triples),
``matching`` (normalised matching), ``plan`` (a question's entities and
triples), ``reading`` (what a prompt's evidence establishes), ``reader`` (the
replies and the leak guard), ``server`` (the HTTP server) and ``diagnosis``
(where a failed question lost its evidence). What ``pgrag eval --oracle`` and
the tests use is named here.
"""

from __future__ import annotations

from .diagnosis import LOOP_METHODS, diagnose, failures
from .gold import Gold, load_gold
from .plan import grounded, plan_for
from .reader import ANSWER_KINDS, Oracle, OracleCannotAnswer, OracleLeak, guard
from .server import OracleServer, model_name

__all__ = ["ANSWER_KINDS", "LOOP_METHODS", "Gold", "Oracle", "OracleCannotAnswer", "OracleLeak", "OracleServer",
           "diagnose", "failures", "grounded", "guard", "load_gold", "model_name", "plan_for"]
