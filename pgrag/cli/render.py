"""Text lines for what the library returns: a hit with its provenance, a
semantic-node build, a triple extraction."""

from __future__ import annotations

from typing import Any


def render_hit(hit: Any, indent: str = "") -> str:
    """A hit: rank, title, excerpt, provenance, and why the method ranked it there."""
    p = hit.provenance
    excerpt = " ".join(hit.text.split())
    excerpt = excerpt if len(excerpt) <= 160 else excerpt[:157] + "..."
    sentences = f"sentences {p.sentences[0].ordinal}-{p.sentences[-1].ordinal}" if p.sentences else "no sentences"
    text = (f"{indent}{hit.rank}. {p.title or p.external_id}  (score {hit.score:.4f})\n"
            f"{indent}   {excerpt}\n"
            f"{indent}   provenance: document {p.external_id!r} (id {p.document_id}), chunk {p.chunk_ordinal}, "
            f"chars {p.char_start}-{p.char_end}, {sentences}")
    if hit.details:  # why the method ranked it there (e.g. TIGRAG's hop, rho and cosine)
        why = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in hit.details.items())
        text += f"\n{indent}   why: {why}"
    return text


def nodes_line(r: dict[str, Any]) -> str:
    """A semantic-node build (``NodeReport`` as a dict)."""
    return (f"semantic nodes: {r['nodes']} for {r['documents']} documents in {r['total_seconds']:.1f}s "
            f"({r['sentences_embedded']} sentences and {r['nodes_embedded']} nodes embedded); "
            f"{r.get('names', 0)} name vectors"
            + (f"; terms stored for {r['terms_filled']} older nodes" if r.get("terms_filled") else ""))


def extraction_line(r: dict[str, Any]) -> str:
    """A triple extraction (``ExtractionReport`` as a dict)."""
    line = (f"triples ({r['extractor']}): {r['triples']} from {r['chunks']} chunks in {r['seconds']:.1f}s"
            f"{', ' + str(r['failed_chunks']) + ' chunks with unusable LLM replies' if r['failed_chunks'] else ''}")
    if r["llm_calls"]:
        line += f"; LLM: {r['llm_calls']} calls, {r['llm_prompt_tokens']} + {r['llm_completion_tokens']} tokens"
    return line
