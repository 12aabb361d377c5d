"""Regenerate docs/BENCHMARKS.md from measured runs on ../shared/bench/2wiki.

    python scripts/benchmarks.py --run         # measure everything, then render
    python scripts/benchmarks.py --run eval    # re-measure one part (ingest, eval, queries, graph, oracle, ...)
    python scripts/benchmarks.py               # only re-render from the saved JSON
    python scripts/benchmarks.py --fold docs/benchmarks/X.json   # move a quoted run into runs.json, then render

Each measurement is a pgrag command line, run as shown in the document; its JSON
lands in docs/benchmarks/. The Markdown is rendered from those files only, so
the figures in it are never edited by hand (a test checks that it matches).
Runs that the docs quote by hand instead (docs/SCALING.md, a few here) live in
one file, docs/benchmarks/runs.json, one key per run named after the file its
command wrote; --fold moves such a file in. The page's last section lists every
file of docs/benchmarks (and every run in runs.json): that is the folder's index.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks"
DOC = ROOT / "docs" / "BENCHMARKS.md"
RUNS = OUT / "runs.json"
BENCH = "../shared/bench/2wiki"
METHODS = "dense,bm25,hybrid,tigrag,t2rag,threadrag,cirag"
VARIANTS = "tigrag-paper,tigrag-no-bm25,tigrag-degree,tigrag-no-rerank"

COMMANDS = {
    "ingest": f"pgrag bench ingest --corpus-file {BENCH}/corpus.json --out docs/benchmarks/ingest.json",
    # the same with ThreadRAG's semantic nodes, which only corpora that ask for them pay
    "ingest_threadrag": (f"pgrag bench ingest --corpus-file {BENCH}/corpus.json --methods threadrag "
                         "--out docs/benchmarks/ingest_threadrag.json"),
    "eval": (f"pgrag eval --corpus-file {BENCH}/corpus.json --questions {BENCH}/questions.jsonl "
             f"--methods {METHODS},{VARIANTS} --out docs/benchmarks/eval.json --plot docs/benchmarks/recall.png"),
    "queries": (f"pgrag bench queries --corpus-file {BENCH}/corpus.json --questions {BENCH}/questions.jsonl "
                f"--methods {METHODS},tigrag-paper --out docs/benchmarks/queries.json"),
    "graph": (f"pgrag bench graph --corpus-file {BENCH}/corpus.json --questions {BENCH}/questions.jsonl "
              f"--out docs/benchmarks/graph.json"),
    # the bundled sample: every method asked through kb.retrieve and through SQL's pgrag.retrieve
    "sql": ("pgrag bench queries --corpus-file pgrag/data/sample_corpus.json --questions "
            "pgrag/data/sample_questions.jsonl --methods dense,bm25,hybrid,tigrag,threadrag,cirag --via both "
            "--warmup 1 -k 5 --out docs/benchmarks/sql_vs_python.json"),
    "follow": (f"pgrag bench follow --corpus-file {BENCH}/corpus.json --limit 600 --rows 10000 --repeat 5 "
               f"--out docs/benchmarks/follow.json"),
}
COSTS = "python scripts/inserver_costs.py --out docs/benchmarks/inserver_costs.json"
ANSWERS = "python scripts/answer_overhead.py --questions 5 --out docs/benchmarks/answer_overhead.json"
GRID = "python scripts/tune_tigrag.py NAME=V1,V2,... --out docs/benchmarks/tigrag_grid.jsonl"
# Issue 37's levers, each alone then together (docs/benchmarks/tigrag_levers.jsonl).
LEVERS = ("python scripts/tune_tigrag.py link_titles=true title_weight=0,0.1,0.2,0.5 --k 2,5,10,20 --depth 80",
          "python scripts/tune_tigrag.py link_titles=false,true link_entities=true title_weight=0.2 "
          "--k 2,5,10,20 --depth 80",
          "python scripts/tune_tigrag.py rerank_depth=40 rerank_question=0.2 rerank_bm25=0.1 rerank_hops=0.05 "
          "link_titles=false link_entities=false,true title_weight=0.2 --k 2,5,10,20 --depth 80",
          "python scripts/tune_tigrag.py rerank_depth=40 rerank_question=0.2,0.05 rerank_bm25=0.1,0 "
          "rerank_hops=0.05 --k 2,5,10,20 --depth 80")
# The answering loops under the oracle reader, on a subset (the gold passages of
# the questions and others drawn at random): indexing and extracting the full
# corpus did not fit the two shared CPUs of the session that measured it. Only the
# aggregates are kept: `pgrag eval` writes per-question rows to *.questions.jsonl
# beside --out, and those and the failure traces are gitignored.
ORACLE = [
    "python scripts/oracle_subset.py --docs 400 --questions 30 --seed 0 --out /tmp/pgrag-oracle-corpus.json",
    (f"pgrag eval --corpus-file /tmp/pgrag-oracle-corpus.json --questions {BENCH}/questions.jsonl "
     "--methods t2rag,cirag,threadrag --oracle --limit 30 --out docs/benchmarks/oracle.json "
     "--failures /tmp/pgrag-oracle-failures.jsonl"),
]
ORACLE_BEFORE = "4f29b54"   # the commit before the two T2RAG fixes the oracle revealed
# The same loops on the full corpus (indexing and spaCy extraction included, about 17 min).
ORACLE_FULL = (f"pgrag eval --corpus-file {BENCH}/corpus.json --questions {BENCH}/questions.jsonl "
               "--methods t2rag,cirag,threadrag --oracle --extract spacy --out docs/benchmarks/oracle_full.json "
               "--failures /tmp/pgrag-oracle-full-failures.jsonl")
EXTRACTOR_BEFORE = "e170451"  # the commit before the spaCy extractor fixes the full-corpus run revealed

# Measured independently (../shared/bench/README.md): whole passages, MiniLM-L6.
REFERENCE = {"dense": (51.8, 62.6), "bm25": (57.2, 67.3)}


def run(parts: list[str]) -> None:
    pgrag = str(Path(sys.executable).with_name("pgrag"))
    if "oracle-full" in parts:
        parts = [p for p in parts if p != "oracle-full"]
        print("$", ORACLE_FULL, flush=True)
        subprocess.run([pgrag, *shlex.split(ORACLE_FULL)[1:]], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    if "oracle" in parts:
        parts = [p for p in parts if p != "oracle"]
        subset, evaluation = (shlex.split(line) for line in ORACLE)
        print("$", "\n$ ".join(ORACLE), flush=True)
        subprocess.run([sys.executable, *subset[1:]], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([pgrag, *evaluation[1:]], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    for part in parts:
        argv = shlex.split(COMMANDS[part])
        print("$", COMMANDS[part], flush=True)
        subprocess.run([pgrag, *argv[1:]], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


# The data files this rendering read, listed at the end of the document, so that
# every file in docs/benchmarks is cited from it (tests/unit/test_docs.py).
READ: list[str] = []


def load(name: str) -> dict | None:
    path = OUT / f"{name}.json"
    if not path.exists():
        return None
    READ.append(path.name)
    return json.loads(path.read_text())


def oracle_full_section(full: dict | None, before: dict | None, evaluation: dict | None) -> list[str]:
    """The loops under the oracle on the whole corpus, beside their no-LLM figures
    (the retrieval each falls back to) from the quality table's run."""
    if not full:
        return []
    from pgrag.bench.report import loop_table

    keys = [f"recall@{k}" for k in full["ks"]]
    out = ["## The answering loops under the oracle reader, full corpus", "", "```", ORACLE_FULL, "```", "",
           f"All {full['corpus']['documents']} passages and {full['questions']} questions, {full['depth']} chunks "
           "per question, spaCy triples: an upper bound under ideal reasoning (see the subset section above for "
           "what the oracle may and may not do), beside each method without an LLM (the quality table's run, "
           "same corpus and depth).", "",
           "| method | " + " | ".join(f"no LLM {k.replace('recall@', 'R@')}" for k in keys) + " | "
           + " | ".join(f"oracle {k.replace('recall@', 'R@')}" for k in keys) + " | oracle EM | oracle F1 |",
           "|---|" + "---|" * (2 * len(keys) + 2)]
    for name, m in full["methods"].items():
        base = (evaluation or {}).get("methods", {}).get(name)
        plain = [f"{base[k]:.1f}" if base else "–" for k in keys]
        out.append(f"| {name} | " + " | ".join(plain) + " | " + " | ".join(f"{m[k]:.1f}" for k in keys)
                   + f" | {m['em']:.1f} | {m['f1']:.1f} |")
    out += ["", loop_table(full), "", "How the runs ended (questions per outcome):", ""]
    out += [f"- {name}: " + "; ".join(f"{key} " + ", ".join(f"{v} {n}" for v, n in values.items())
                                      for key, values in m["outcomes"].items())
            for name, m in full["methods"].items()]
    if before:
        out += ["", "A defect this run revealed, in the spaCy extractor that T2RAG and CIRAG read: 2Wiki's "
                "first sentences gave no usable fact. \"X is a film directed by Y\" gave (a film; directed by; "
                "Y), \"X is a song by Y\" gave nothing, \"Born in X, she ...\" gave nothing, and a birthplace "
                "lost its wider place (\"Saint James, Port of Spain\"). Fixed after commit "
                f"{EXTRACTOR_BEFORE} (same command; ThreadRAG reads no triples):", "",
                "| method | extractor | " + " | ".join(k.replace("recall@", "R@") for k in keys) + " | EM | F1 |",
                "|---|---|" + "---|" * (len(keys) + 2)]
        for name in full["methods"]:
            for label, r in ((f"before ({EXTRACTOR_BEFORE})", before), ("after", full)):
                m = r["methods"].get(name)
                if m and name != "threadrag":
                    out.append(f"| {name} | {label} | " + " | ".join(f"{m[k]:.1f}" for k in keys)
                               + f" | {m['em']:.1f} | {m['f1']:.1f} |")
    return out + [""]


def node_stage(runs: list[dict]) -> list[float]:
    """ThreadRAG's mean `nodes` stage of each bench queries run."""
    return [r["threadrag"]["stage_ms_mean"]["nodes"] for r in runs]


def threadrag_ratios(runs: list[dict]) -> str:
    """The range of ThreadRAG's p50 / dense p50 over bench queries runs."""
    values = [r["threadrag"]["p50_to_dense"] for r in runs]
    return f"{min(values):.2f}-{max(values):.2f}"


def rare_terms_paragraph(rare: dict) -> str:
    """ThreadRAG's rare terms before and after (docs/benchmarks/threadrag_rare_terms.json)."""
    def nodes(label: str) -> list[float]:
        return node_stage(rare[label])

    def ratios(label: str) -> str:
        return threadrag_ratios(rare[label])

    probe, embedding = rare["probe"], rare["tigrag_embedding_ms"]
    dense = [r["dense"]["p50_ms"] for label in ("before", "after") for r in rare[label]]
    tigrag = [r["tigrag"]["p50_to_dense"] for label in ("before", "after") for r in rare[label] if "tigrag" in r]
    return (
        "ThreadRAG's rare terms (the lexical edges' keys) no longer cost a token-index probe per term in "
        "`threadrag_nodes`: the query returns each node's `pgrag.tokenize` terms and the method keeps those "
        "with df <= `rare_df` by the question's ranking index (`pgrag.methods.threadrag_retrieval.rare_terms`, one "
        f"batched lookup, `TermIndex.nodes`); {rare['same_hits']}. {len(rare['before'])} runs each, "
        f"alternating ({rare['command']}; `docs/benchmarks/threadrag_rare_terms.json`), on another machine "
        f"than the table above ({rare['machine']['model']}, {rare['machine']['cpus']} cores: dense "
        f"{min(dense):.0f}-{max(dense):.0f} ms): the `nodes` stage {mean(nodes('before')):.1f} → "
        f"{mean(nodes('after')):.1f} ms a question (the runs' means: "
        f"{' / '.join(f'{x:.1f}' for x in nodes('before'))} → {' / '.join(f'{x:.1f}' for x in nodes('after'))}), "
        f"threadrag {ratios('before')}× → {ratios('after')}× dense. The query alone (`{probe['command']}`, "
        f"{removed(probe['command'])}: "
        f"{probe['calls']} sets of {probe['documents_per_call']} documents, the same terms in "
        f"{'all' if probe['same_terms'] == probe['calls'] else probe['same_terms']}) took "
        f"{probe['before_ms']:.1f} → {probe['now_ms']:.1f} ms a call; most of the rest is `pgrag.tokenize` "
        "itself, about 1.3 ms a call, which migration 0011 saves (below). tigrag on this "
        f"machine: {min(tigrag):.2f}-{max(tigrag):.2f}× dense (its embedding about "
        f"{embedding['question_and_hop_2']:.0f} ms a question, the question's own {embedding['question']:.1f}).")


def node_terms_paragraph(terms: dict) -> str:
    """ThreadRAG's node terms tokenized per query against stored (docs/benchmarks/threadrag_node_terms.json)."""
    def stage(label: str) -> list[float]:
        return node_stage(terms[label])

    def ratios(label: str) -> str:
        return threadrag_ratios(terms[label])

    def runs(values: list[float]) -> str:
        return " / ".join(f"{x:.1f}" for x in values)

    probe, fill, write = terms["probe"], terms["fill"], terms["write"]

    def spread(way: str) -> str:
        values = [r[way]["us_per_node"] for r in write["runs"]]
        return f"{min(values):.0f}-{max(values):.0f}"

    dense = [r["dense"]["p50_ms"] for label in ("tokenized", "stored") for r in terms[label]]
    return (
        "ThreadRAG's node terms are stored with the node (migration 0011): the terms, `pgrag.tokenize(text)`, "
        "are computed when a node is written (by the INSERT inside the server; a client asks the server for "
        "them before its COPY), and `threadrag_nodes` reads the column instead of tokenizing every node it "
        "returns (nodes written before "
        f"0011 are still tokenized by the query until `pgrag threadrag-index` fills them). {terms['same_hits']}. "
        f"{len(terms['stored'])} runs each, alternating ({terms['command']}, the tokenizing form through "
        f"{terms['tokenized_form']}; `docs/benchmarks/threadrag_node_terms.json`), on the {terms['machine']['model']} "
        f"(dense {min(dense):.0f}-{max(dense):.0f} ms): the `nodes` stage {mean(stage('tokenized')):.1f} → "
        f"{mean(stage('stored')):.1f} ms a question (the runs' means: {runs(stage('tokenized'))} → "
        f"{runs(stage('stored'))}), threadrag {ratios('tokenized')}× → {ratios('stored')}× dense. The node query "
        f"alone (`{probe['command']}`, {removed(probe['command'])}: {probe['calls']} sets of "
        f"{probe['documents_per_call']} documents, the "
        f"same terms in {'all' if probe['same_terms'] == probe['calls'] else probe['same_terms']}), median "
        f"milliseconds a call: {probe['probe_per_term_ms']:.1f} with a token-index probe per term (before "
        f"8c89fcb), {probe['tokenized_ms']:.1f} tokenized, {probe['stored_ms']:.1f} stored. What it costs at "
        f"ingest: writing {write['nodes']:,} of these nodes took {spread('bulk_write')} µs a node against "
        f"{spread('copy_without_terms')} by COPY without their terms (`{write['command']}`, "
        f"{removed(write['command'])}, "
        f"{len(write['runs'])} runs, each alternating the two and rolling back), most of it `pgrag.tokenize` "
        "itself; filling the "
        f"{fill['nodes']:,} nodes of this corpus afterwards ({fill['command']}) took {fill['seconds']:.2f} s, "
        f"{fill['seconds'] / fill['nodes'] * 1e6:.0f} µs a node.")


def removed(command: str) -> str:
    """A probe whose question was answered is deleted; its figures stay, saying where it is."""
    script = next(word for word in command.split() if word.startswith("scripts/"))
    return f"a probe removed once answered (git log -- {script})"


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def cirag_oracle_section() -> list[str]:
    """Issue 37: why CIRAG is weak under the oracle reader, per question."""
    return ["## Why CIRAG is weak under the oracle reader (issue 37)", "", "```",
            "python scripts/oracle_subset.py --docs 400 --questions 30 --seed 0 --out /tmp/oracle-corpus.json",
            "pgrag eval --corpus-file /tmp/oracle-corpus.json --questions ../shared/bench/2wiki/questions.jsonl "
            "--methods cirag,threadrag --oracle --limit 30 --out /tmp/oracle.json --failures /tmp/failures.jsonl",
            "```", "",
            "On this subset (a run of the current code: cirag R@2 / R@5 80.8 / 83.3, EM 53.3; threadrag "
            "80.0 / 96.7, EM 100), 13 of cirag's 14 failed questions are `never_retrieved`: the gold fact never "
            "reaches the 30 candidate triples the oracle sees, in any round, though in most of them the integrator "
            "asks the "
            "right next question. Two examples from the failures file: for \"What is the place of birth of "
            "Nicki Minaj?\" the spaCy triple that holds it is (Onika Tanya Maraj-Petty; Born in; Saint James, "
            "Port of Spain), whose subject is her birth name, and 30 triples \"(Minaj; ...)\" rank above it; for "
            "\"What is the composer of Billy Elliot?\" it is (music; composed by; Stephen Warbeck), which does "
            "not name the film, and other documents' \"composer\" triples rank above it. That is the limit of "
            "spaCy triples ranked by the cosine of the bare triple, not of the loop. One defect was found and "
            "fixed on the way: a sentence shared by two overlapping chunks gave its triples twice (9 % of the "
            "subset's triples, up to 37 % of a long document's) and both copies took candidate slots; "
            "`pgrag_internal.cirag_triples` now keeps one per document. The subset's figures did not change with it. "
            "Not tried: ranking triples with their document's title (a stored-embedding change).", ""]


def by_hops_rows(methods: dict, hops: list[str]) -> list[str]:
    """A table row a method: its R@5 (R@2) for each question type in ``hops``."""
    return [f"| {method} | " + " | ".join(
        f"{m['recall_by_type'][t]['recall@5']:.1f} ({m['recall_by_type'][t]['recall@2']:.1f})" for t in hops) + " |"
        for method, m in methods.items()]


def musique_section() -> list[str]:
    """Issue 44: MuSiQue beside 2Wiki, per hop, and the chain levers on both (runs.json)."""
    runs = json.loads(RUNS.read_text(encoding="utf-8")) if RUNS.exists() else {}
    run44 = runs.get("musique_issue44")
    if not run44:
        return []
    benches = ("musique", "2wiki")
    names = {"musique": "MuSiQue (102)", "2wiki": "2Wiki (111)"}
    out = ["## MuSiQue beside 2Wiki (issue 44)", "", "```", *run44["commands"], "```", "",
           "The same `pgrag eval` on both shared question sets (20 chunks a question, MiniLM, CPU); R@k 95 % is "
           "the percentile bootstrap interval over the questions (1,000 resamples, seed 0). `tigrag` is the "
           "default (chains: mention links with chain support, a third hop while two terms remain, the lead, "
           "which the documents the question names by title lead; bridges by context, at most 8, each hop over "
           "its best, `hop_remainder=\"replace\"` and text titles); `tigrag (before chains)` the same without "
           "the first; `tigrag (before bridges)` that "
           "without the bridge levers; `tigrag (before replace)` "
           "that with `hop_remainder=\"add\"`; `tigrag (before text titles)` with `\"add\"` alone; "
           "`tigrag (before)` the method before all of them: on MuSiQue the same `pgrag eval`, "
           "on 2Wiki the first row of the levers' table below (the same Recall@k, computed by the levers' "
           "loop). The quality table at the top of this page is a later run of the current default (the same "
           "figures on 2Wiki). Every figure of this section is run `musique_issue44` of runs.json.", "",
           "| method | " + " | ".join(f"{names[b]} {col}" for b in benches
                                      for col in ("R@2", "R@5", "R@10", "R@20", "R@2 95 %", "R@5 95 %")) + " |",
           "|---|" + "---|" * 12]
    for method in run44["eval"]["musique"]:
        cells = []
        for b in benches:
            m = run44["eval"][b].get(method)
            if m is None:
                cells += ["–"] * 6
                continue
            cells += [f"{m[f'recall@{k}']:.1f}" for k in (2, 5, 10, 20)]
            cells += [f"{m[f'interval@{k}'][0]:.1f}–{m[f'interval@{k}'][1]:.1f}" if f"interval@{k}" in m else "–"
                      for k in (2, 5)]
        out.append(f"| {method} | " + " | ".join(cells) + " |")
    out += ["", "By hops on MuSiQue (the questions' `type`; R@5, and R@2 in brackets):", "",
            "| method | " + " | ".join(run44["hops"]) + " |", "|---|" + "---|" * len(run44["hops"])]
    out += by_hops_rows(run44["eval"]["musique"], run44["hops"])
    types = run44["eval"]["musique"]["tigrag"]["recall_by_type"]
    if all("interval@5" in types[t] for t in run44["hops"]):
        out += ["", "tigrag's R@5 95 % interval by hops, each over its own questions (the report's "
                "`recall_by_type`): " + ", ".join(
                    f"{t} {types[t]['interval@5'][0]:.1f}–{types[t]['interval@5'][1]:.1f} "
                    f"({types[t]['questions']} questions)" for t in run44["hops"]) + "."]
    q = run44["queries"]
    out += ["", "One `pgrag bench queries` run per benchmark (`--methods dense,tigrag,tigrag-paper`, the methods "
            "taking turns on each question): " + "; ".join(
                f"{names[b]}: " + ", ".join(f"{name} p50 {r['latency_ms_p50']:.1f} ms ({r['p50_to_dense']:.1f} x "
                                             f"dense)" for name, r in q[b].items()) for b in benches) + ". "
            + run44["latency_note"], "",
            "Each chain lever alone on the old default, then together (`pgrag.methods.tigrag_chain`; the "
            "options are `kb.retrieve` settings of `tigrag`; p50 from separate runs, indicative only: the last "
            "eight rows' with the model runtime's vector cache off, the rows above with it on). Three "
            "rows follow on the default that kept `hop_remainder` (as `\"add\"`): without text titles, "
            "with them, and with their links; five on the default before bridges "
            "(`hop_remainder=\"replace\"`, text titles): the bridge levers alone, then together; seven on "
            "the default before chains: the chain levers alone, then together; the last, that default with "
            "the named lead (`lead_named`):", "",
            "| lever | options | " + " | ".join(f"{names[b]} {col}" for b in benches
                                                for col in ("R@2", "R@5", "R@10", "R@5 95 %", "p50 ms")) + " |",
            "|---|---|" + "---|" * 10]
    for row in run44["levers"]:
        options = ", ".join(f"{k}={v}" for k, v in row["options"].items()) or "–"
        cells = []
        for b in benches:
            r = row[b]
            cells += [f"{r['R@2']}", f"{r['R@5']}", f"{r['R@10']}", f"{r['CI@5'][0]}–{r['CI@5'][1]}", f"{r['p50']}"]
        out.append(f"| {row['lever']} | {options} | " + " | ".join(cells) + " |")
    out.append("")
    for note in run44["notes"]:
        out += [note, ""]
    return out


def oracle_musique_section() -> list[str]:
    """Issue 44: T2RAG, CIRAG and ThreadRAG on MuSiQue under the oracle reader (runs.json)."""
    runs = json.loads(RUNS.read_text(encoding="utf-8")) if RUNS.exists() else {}
    run, run44 = runs.get("oracle_musique"), runs.get("musique_issue44")
    if not run or not run44:
        return []
    plain = run44["eval"]["musique"]
    types = sorted(next(iter(run["em_by_type"].values())))
    out = ["## The answering loops under the oracle reader on MuSiQue (issue 44)", "", "```", run["command"], "```",
           "", f"All {run['documents']} passages and {run['questions']} questions, {run['depth']} chunks per "
           "question, spaCy triples, the oracle reader (an upper bound under ideal reasoning; see the 2Wiki "
           "sections above), beside each method's retrieval only (the MuSiQue table above; tigrag for "
           "reference). Run `oracle_musique` of runs.json. " + run["notes"][0], "",
           "| method | retrieval only R@2 | retrieval only R@5 | oracle R@2 | oracle R@5 | oracle R@20 | oracle EM | "
           f"oracle F1 | oracle EM {' / '.join(types)} |", "|---|" + "---|" * 8,
           f"| tigrag | {plain['tigrag']['recall@2']:.1f} | {plain['tigrag']['recall@5']:.1f} | "
           + " | ".join(["–"] * 6) + " |"]
    for name, m in run["methods"].items():
        out.append(f"| {name} | {plain[name]['recall@2']:.1f} | {plain[name]['recall@5']:.1f} | "
                   f"{m['recall@2']:.1f} | {m['recall@5']:.1f} | {m['recall@20']:.1f} | "
                   f"{m['em']:.1f} | {m['f1']:.1f} | "
                   + " / ".join(f"{run['em_by_type'][name][t]:.1f}" for t in types) + " |")
    out += ["", "Where the failed questions lost their evidence (pgrag.bench.oracle.diagnose): " + "; ".join(
        f"{name} " + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
        for name, kinds in run["failures"].items()) + ". " + run["notes"][1], ""]
    return out


def heldout_section() -> list[str]:
    """Issue 44: tigrag on questions it was never tuned on (runs.json, run ``heldout``)."""
    runs = json.loads(RUNS.read_text(encoding="utf-8")) if RUNS.exists() else {}
    run, run44 = runs.get("heldout"), runs.get("musique_issue44")
    if not run or not run44:
        return []
    ev = {b: e["methods"] for b, e in run["eval"].items()}
    kinds = {"musique": "MuSiQue train", "musique_dev": "MuSiQue dev", "hotpotqa": "HotpotQA", "2wiki_dev": "2Wiki dev"}
    sets = {b: f"{kinds[b]} ({e['questions']})" for b, e in run["eval"].items()}
    musique = [b for b in sets if b.startswith("musique")]
    left_out = "; ".join(f"{n} of the {kinds[b]} questions are also among ../shared/bench/"
                         + ("2wiki's 111" if b.startswith("2wiki") else "musique's 102")
                         for b, n in run["left_out"].items())
    out = ["## Questions outside the tuning sets (issue 44)", "", "```", *run["commands"], "```", "",
           f"Question sets no setting of pgrag was tuned on, from {run['source']}. `pgrag bench convert` makes "
           "each set's passages one corpus (" + ", ".join(f"{sets[b]}: {e['documents']:,} passages"
                                                          for b, e in run["eval"].items()) +
           "), so every question is asked against all the others' passages too, as in HippoRAG's setting. "
           f"{left_out}, and are left out (`--without`); HotpotQA is a third benchmark, 2-hop (bridge and "
           "comparison questions). 20 chunks a question, MiniLM, CPU; "
           "R@5 95 % is the percentile bootstrap interval over the questions (1,000 resamples, seed 0). Run "
           "`heldout` of runs.json.", "",
           "| set | method | R@2 | R@5 | R@10 | R@20 | R@5 95 % |", "|---|---|---|---|---|---|---|"]
    for b in sets:
        for method, m in ev[b].items():
            out.append(f"| {sets[b]} | {method} | " + " | ".join(f"{m[f'recall@{k}']:.1f}" for k in (2, 5, 10, 20))
                       + f" | {m['interval@5'][0]:.1f}–{m['interval@5'][1]:.1f} |")
    for b in musique:
        by_type = ev[b]["tigrag"]["recall_by_type"]
        hops = sorted(by_type)
        out += ["", f"By hops on the {sets[b]} questions (R@5, and R@2 in brackets):", "",
                "| method | " + " | ".join(f"{t} ({by_type[t]['questions']} questions)" for t in hops) + " |",
                "|---|" + "---|" * len(hops)]
        out += by_hops_rows(ev[b], hops)
    out += ["", "Issue 44's levers on these questions (`scripts/tune_tigrag.py --bench heldout/<set>` with the "
            "options of the row; paired: " + run["paired"] + "):", "",
            "| set | tigrag | options | R@2 | R@5 | R@10 | R@20 | paired R@2 | paired R@5 |",
            "|---|---|---|---|---|---|---|---|---|"]
    for b in sets:
        for row in run["levers"][b]:
            options = ", ".join(f"{k}={v}" for k, v in row["options"].items()) or "–"
            paired = [f"{p[0]:+.1f} ({p[1]:+.1f} to {p[2]:+.1f}), {p[3]} / {p[4]}" if p else "–"
                      for p in (row.get("paired_R@2"), row.get("paired_R@5"))]
            out.append(f"| {sets[b]} | {row['row']} | {options} | {row['R@2']} | {row['R@5']} "
                       f"| {row['R@10']} | {row['R@20']} | {paired[0]} | {paired[1]} |")
    tuned = run44["eval"]["musique"]
    out += ["", f"On the 102 it was tuned on (run `musique_issue44`), tigrag's R@2 / R@5 are "
            f"{tuned['tigrag']['recall@2']:.1f} / {tuned['tigrag']['recall@5']:.1f} and dense's "
            f"{tuned['dense']['recall@2']:.1f} / {tuned['dense']['recall@5']:.1f}; issue 44's levers took tigrag "
            f"there from {tuned['tigrag (before)']['recall@2']:.1f} / {tuned['tigrag (before)']['recall@5']:.1f}."]
    for b in sets:
        m, dense, before = ev[b]["tigrag"], ev[b]["dense"], run["levers"][b][-1]
        lows = [before[f"paired_R@{k}"][1] for k in (2, 5)]
        highs = [before[f"paired_R@{k}"][2] for k in (2, 5)]
        verdict = ("both intervals above zero" if min(lows) > 0 else
                   "both intervals across zero" if max(lows) <= 0 <= min(highs) else "not both above zero")
        out[-1] += (f" On the {sets[b]} questions: tigrag {m['recall@2']:.1f} / {m['recall@5']:.1f}, dense "
                    f"{dense['recall@2']:.1f} / {dense['recall@5']:.1f}; the levers together change R@2 by "
                    f"{before['paired_R@2'][0]:+.1f} and R@5 by {before['paired_R@5'][0]:+.1f}, {verdict}.")
    out += [""]
    for note in run["notes"]:
        out += [note, ""]
    return out


def untitled_section() -> list[str]:
    """Issue 44: recall on the corpora indexed without titles (runs.json, run ``untitled``), beside the
    same sets with them (runs ``musique_issue44`` and ``heldout``)."""
    runs = json.loads(RUNS.read_text(encoding="utf-8")) if RUNS.exists() else {}
    run = runs.get("untitled")
    if not run or "heldout" not in runs or "musique_issue44" not in runs:
        return []
    titled = {**runs["musique_issue44"]["eval"],     # each set's methods with titles
              **{f"heldout_{b}": e["methods"] for b, e in runs["heldout"]["eval"].items()}}
    sets = {b: f"{run['names'][b]} ({e['questions']})" for b, e in run["eval"].items()}
    out = ["## Corpora without titles (issue 44)", "", "```", *run["commands"], "```", "", run["about"], "",
           "| set | method | R@2 | R@5 | R@10 | R@20 | R@5 95 % | with titles: R@2 | R@5 |",
           "|---|---|---|---|---|---|---|---|---|"]
    for b, e in run["eval"].items():
        for method, m in e["methods"].items():
            t = titled[b][method]
            out.append(f"| {sets[b]} | {method} | " + " | ".join(f"{m[f'recall@{k}']:.1f}" for k in (2, 5, 10, 20))
                       + f" | {m['interval@5'][0]:.1f}–{m['interval@5'][1]:.1f} | {t['recall@2']:.1f} "
                         f"| {t['recall@5']:.1f} |")
    out += ["", "Issue 44's levers without titles: tigrag against itself without any of them (" + run["levers_options"]
            + "; paired per question, 1,000 resamples, seed 0: the mean difference, its 95 % interval, and the "
              "questions better / worse):", "",
            "| set | without the levers: R@2 | R@5 | R@10 | paired R@2 | paired R@5 |", "|---|---|---|---|---|---|"]
    for b, row in run["levers"].items():
        paired = [f"{p[0]:+.1f} ({p[1]:+.1f} to {p[2]:+.1f}), {p[3]} / {p[4]}"
                  for p in (row["paired_R@2"], row["paired_R@5"])]
        out.append(f"| {sets[b]} | {row['R@2']} | {row['R@5']} | {row['R@10']} | {paired[0]} | {paired[1]} |")
    out += [""]
    for note in run["notes"]:
        out += [note, ""]
    return out


def tolerance_section() -> list[str]:
    """Issue 45: tigrag's PPR tolerance, recall and time (runs.json, run ``ppr_tolerance``)."""
    runs = json.loads(RUNS.read_text(encoding="utf-8")) if RUNS.exists() else {}
    run = runs.get("ppr_tolerance")
    if not run:
        return []
    out = ["## The PPR's tolerance (issue 45)", "", "```", *run["commands"], "```", "",
           run["intro"], "",
           "| set | tolerance | R@2 | R@5 | R@10 | R@20 | same top 20 as at 1e-4 | expansion ms | p50 ms |",
           "|---|---|---|---|---|---|---|---|---|"]
    for row in run["rows"]:
        timed = [r for r in row["runs"] if "expand" in r]
        expand = " / ".join(f"{r['expand']:.1f}" for r in timed) or "–"
        p50 = " / ".join(f"{r['p50']:.1f}" for r in timed) or "–"
        out.append(f"| {row['set']} | {row['tolerance']:.0e} | {row['R@2']} | {row['R@5']} | {row['R@10']} "
                   f"| {row['R@20']} | {row['same']} of {row['questions']} | {expand} | {p50} |")
    out += ["", *[line for note in run["notes"] for line in (note, "")]]
    return out


def levers_section() -> list[str]:
    """Issue 37: what each candidate lever buys tigrag on the 111 questions."""
    path = OUT / "tigrag_levers.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    READ.append(path.name)
    evaluation = load("eval_issue37")
    out = ["## TIGRAG levers past the paper (issue 37)", "", "```", *LEVERS, "```", "",
           "Each lever alone on the old default (`tigrag` before issue 37: no title linking), then together; "
           "the 111 questions, 80 chunks per question as in `pgrag eval` (the first row is that command's run, "
           "with `--k 2,5,10,20`). p50 was measured while two other developers' test suites ran on the same "
           "two cores: compare recall, not these times.", "",
           "| lever | options | R@2 | R@5 | R@10 | R@20 | p50 ms |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        options = ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "–"
        out.append(f"| {r['lever']} | {options} | {r['R@2']} | {r['R@5']} | {r['R@10']} | {r['R@20']} "
                   f"| {r['p50_ms']} |")
    out += ["", "Kept, and now the default (`link_titles`, `link_entities`, `title_weight` 0.2; "
            "`tigrag-paper` and the Table 10 ablations keep all three off): title linking "
            "(`pgrag.titles`). 2Wiki's questions name their first-hop documents by title (163 of the 270 gold "
            "titles of the 111 questions are capitalised runs of the question's words that are a document's "
            "title, with one false link), and the bridge documents are titled by names the first-hop documents "
            "mention; linking both puts the whole chain into the hops' rankings instead of hoping the token "
            "graph and the cosine surface it. Each half alone gives about 3 points of R@5; together they give "
            "10, because the question's documents are the ones whose names find the bridge.",
            "",
            "Not kept: the final learned-free rerank (`rerank_depth` > 0: the best 40 chunks rescored by the "
            "cosine to the question alone, BM25 of the question's terms and the hops that reached each chunk) "
            "lost recall with every weight tried, alone, with entity linking and on the new default (a guess, not "
            "checked question "
            "by question: the question-only cosine and BM25 favour the documents the question names over the "
            "bridge documents it does not). Snowball stemming in `pgrag.tokenize` was not "
            "measured: it changes the stored tokens, postings and graph of every corpus, so `tigrag-paper`'s "
            "figures could not stay as they are without a per-corpus tokenizer. No cross-encoder installs "
            "offline (../shared/ENVIRONMENT.md), so none was tried."]
    if evaluation:
        m = evaluation["methods"]
        keys = [f"recall@{k}" for k in evaluation["ks"]]
        out += ["", "The new default in one `pgrag eval` run (`pgrag eval --corpus-file "
                "../shared/bench/2wiki/corpus.json --questions ../shared/bench/2wiki/questions.jsonl --methods "
                "dense,tigrag,tigrag-paper --k 2,5,10,20`, the same loaded machine):", "",
                "| method | " + " | ".join(k.replace("recall@", "R@") for k in keys) + " | p50 ms | p95 ms |",
                "|---|" + "---|" * (len(keys) + 2)]
        for name, r in m.items():
            out.append(f"| {name} | " + " | ".join(f"{r[k]:.1f}" for k in keys)
                       + f" | {r['latency_ms_p50']:.1f} | {r['latency_ms_p95']:.1f} |")
        if "dense" in m and "tigrag" in m:
            out += ["", f"tigrag's p50 is {m['tigrag']['latency_ms_p50'] / m['dense']['latency_ms_p50']:.1f} x "
                    "dense's in this run (the issue's bound: 10 x). Title linking itself costs 0.08 ms a question "
                    "(a dictionary lookup per run of capitalised words) and, once per graph version, a read of "
                    "every title (about 0.1 s on this machine, 2.5 MB; `pgrag.titles`), but the second hop now "
                    "encodes mu + e for the linked documents' entities too: 14.5 vectors a question instead of "
                    "9.2 (the first 30 questions)."]
    queries = load("queries_issue37")
    if queries:
        m = queries["methods"]
        out += ["", "`pgrag bench queries --corpus-file ../shared/bench/2wiki/corpus.json --questions "
                "../shared/bench/2wiki/questions.jsonl --methods dense,tigrag,tigrag-paper` "
                "(`docs/benchmarks/queries_issue37.json`), once, on the same machine while it was loaded again: "
                + ", ".join(f"{name} p50 {r['latency_ms_p50']:.1f} ms ({r['p50_to_dense']:.1f} x dense)"
                            for name, r in m.items())
                + f"; tigrag's title stage {m['tigrag']['stage_ms_mean'].get('titles', 0.0):.1f} ms a question. "
                "Most of every method's time here is the model's encoding competing for the cores; the 4.5 x "
                "of the quiet table below predates title linking and was not remeasured."]
    return out + [""]


def render() -> str:
    sys.path.insert(0, str(ROOT))
    from pgrag.bench.report import loop_table, markdown_table

    ingest, evaluation, queries, graph = load("ingest"), load("eval"), load("queries"), load("graph")
    with_nodes = load("ingest_threadrag")
    grid_file = OUT / "tigrag_grid.jsonl"
    grid = [json.loads(line) for line in grid_file.read_text().splitlines()] if grid_file.exists() else []
    READ.extend([grid_file.name] if grid else [])
    out = ["# Benchmarks", "",
           "<!-- Generated by scripts/benchmarks.py from docs/benchmarks/*.json; do not edit by hand. -->", "",
           "All figures on `../shared/bench/2wiki` (6,119 passages, 111 questions), measured on one",
           "shared machine; compare ratios within a run, not absolute times across machines.",
           "Regenerate with `python scripts/benchmarks.py --run` (or `make bench`).", ""]
    if evaluation:
        c = evaluation["corpus"]
        out += ["## Retrieval quality (`pgrag eval`)", "", "```", COMMANDS["eval"], "```", "",
                f"{evaluation['questions']} questions; each method returns {evaluation['depth']} chunks and "
                f"Recall@k counts the first k distinct documents among them; {c['embedding_model']} "
                f"embeddings; chunks of 6 sentences with 2 overlapping (a 2Wiki passage is usually one "
                f"chunk: {c['chunks']} chunks for {c['documents']} documents). Percent.", "",
                markdown_table(evaluation), "", "![Recall@k per method](benchmarks/recall.png)", "",
                "Reference points measured independently with whole passages as units "
                "(../shared/bench/README.md):", "",
                "| method | R@2 ref | R@5 ref | R@2 here | R@5 here | Δ R@2 | Δ R@5 |", "|---|---|---|---|---|---|---|"]
        for name, (r2, r5) in REFERENCE.items():
            m = evaluation["methods"].get(name)
            if m:
                out.append(f"| {name} | {r2} | {r5} | {m['recall@2']:.1f} | {m['recall@5']:.1f} | "
                           f"{m['recall@2'] - r2:+.1f} | {m['recall@5'] - r5:+.1f} |")
        out += ["", "No LLM is configured in these runs, so the answering methods show their documented "
                "retrieval-only fallbacks: `t2rag` is the question's embedding against the proposition index "
                "(spaCy triples) until k distinct chunks are covered; `threadrag` is one pass of anchors, "
                "energy pathfinding and linearised paths over the question's documents (with bridge "
                "retrieval for the top document's entities); `cirag` is one construction round (top-10 "
                "documents, their triples ranked by cosine). EM/F1 need an LLM (`--llm URL --llm-model M`).",
                "", "TIGRAG variants: `tigrag` is pgrag's default; `tigrag-paper` is the paper's pipeline "
                "exactly (pure cosine rerank, every entity type, no pool cap); the other three are the "
                "ablations of the paper's Table 10, each applied to `tigrag-paper`: no BM25 weighting "
                "(rho = sum of PPR weights), degree centrality instead of PPR, no dense rerank.", ""]
    oracle, before = load("oracle"), load("oracle_before")
    if oracle:
        out += ["## The answering loops under the oracle reader (`pgrag eval --oracle`)", "", "```", *ORACLE, "```",
                "",
                "An upper bound under ideal reasoning, not a model's figures. No capable LLM is reachable here, "
                "so the oracle reader (`pgrag.bench.oracle`) answers the loops' prompts: it knows each question's gold "
                "evidence triples, sees only the prompt, and fills a placeholder, a next hop or an answer only "
                "when the prompt's evidence states it (a line naming both ends of a gold triple); it never "
                "reads the corpus and never puts a value in a reply that its prompt lacks. The figures therefore "
                "measure each loop's retrieval given perfect reading.", "",
                f"Corpus: {oracle['corpus']['documents']} passages, the gold passages of the "
                f"{oracle['questions']} questions and others drawn at random, so far fewer distractors "
                "than the full corpus: compare the methods with each other, not with the table above. "
                f"Each method returns {oracle['depth']} chunks; percent; spaCy triples.", "",
                loop_table(oracle), "", "How the runs ended (questions per outcome):", ""]
        out += [f"- {name}: " + "; ".join(f"{key} " + ", ".join(f"{v} {n}" for v, n in values.items())
                                          for key, values in m["outcomes"].items())
                for name, m in oracle["methods"].items()]
        out += ["", "Failure labels: `never_retrieved`, a gold triple was stated by no prompt (the evidence "
                "never came); `dropped`, every triple was in some prompt but no answer prompt held them all; "
                "`ranked_out`, answered but a gold passage is not among the top 5 documents. Per-question "
                "traces of the failures are in the `--failures` file.", ""]
        if before and "t2rag" in before["methods"] and "t2rag" in oracle["methods"]:
            keys = [f"recall@{k}" for k in oracle["ks"]]
            out += [f"Two T2RAG defects the oracle revealed, fixed after commit {ORACLE_BEFORE} (same command):"
                    " the hits listed each round's chunks after all of the previous round's k = 5, so the "
                    "second hop's passage never counted in Recall@5; and a triple searched in a shared pool "
                    "that stayed open (the other queries' propositions took the k chunks) was never searched "
                    "again.", "",
                    "| t2rag | " + " | ".join(k.replace("recall@", "R@") for k in keys) + " | EM | F1 | rounds/q |",
                    "|---|" + "---|" * (len(keys) + 3)]
            for label, r in ((f"before ({ORACLE_BEFORE})", before), ("after", oracle)):
                m = r["methods"]["t2rag"]
                out.append(f"| {label} | " + " | ".join(f"{m[k]:.1f}" for k in keys)
                           + f" | {m['em']:.1f} | {m['f1']:.1f} | {m['rounds']:.2f} |")
            out.append("")
    out += oracle_full_section(load("oracle_full"), load("oracle_full_before"), evaluation)
    if grid:
        out += ["## TIGRAG settings (`scripts/tune_tigrag.py`)", "", "```", GRID, "```", "",
                "One setting varied at a time from the default before issue 37 (no title linking; gamma 20, "
                "damping 0.5, graph_weight 0.2, "
                "iota 1, hops 2, max_pool 300), on the 111 questions, 20 chunks per query. The paper gives "
                "neither gamma nor the damping factor; both barely matter here, so the defaults are the "
                "cheapest among the best. p50 is noisy (shared machine).", "",
                "| setting | value | R@2 | R@5 | p50 ms |", "|---|---|---|---|---|"]
        for row in grid:
            (name, value), = [(k, v) for k, v in row.items() if k not in ("preset", "R@2", "R@5", "p50_ms")]
            out.append(f"| {name} | {value} | {row['R@2']} | {row['R@5']} | {row['p50_ms']} |")
        out += ["", "The second hop's rerank vectors (`hop_embedding`; recall by "
                "`python scripts/tune_tigrag.py hop_embedding=concat,sum,joint`, latency by a probe "
                "removed once answered (`git log -- scripts/hop_embedding_latency.py`), the variants taking "
                "turns on each question, "
                "measured once on a quiet machine and repeated under load): the paper's one vector "
                "per new entity, M(mu + e), 7.8 per question, costs 34 ms of encoding, 42 % of `tigrag`'s "
                "time (p50 82 ms, dense 21 ms in that run); both presets keep it, because the cheaper "
                "vectors lose recall. `sum` encodes the entities alone in one batch (39 tokens per "
                "question instead of 169) and takes normalise(M(mu) + M(e)): 19 ms, p50 67 ms, but R@2 / "
                "R@5 68.0 / 84.2 instead of 69.4 / 84.5 (weights 0.3 to 1.5 on M(e) do no better; on "
                "`tigrag-paper` 59.2 / 75.0 instead of 61.3 / 78.8; on MuSiQue's 102 with today's default, "
                "`--bench musique --k 2,5,10`, R@2 / R@5 / R@10 61.5 / 78.0 / 85.4 instead of "
                "63.6 / 80.1 / 86.1, p50 65 against 88 ms with the remaining-part texts still encoded whole). "
                "`joint`, one vector for mu plus all "
                "the entities (the graph stage's query): 16 ms, 64.0 / 79.7. Reusing M(mu) for the "
                "second hop (no encoding at all) still leaves `tigrag` at 2.2 × dense's p50, with the "
                "one-hop recall (59.2 / 68.9): the expansion (PPR, 25 ms) and the question's own "
                "embedding (13 ms) are most of the rest.", ""]
    out += (levers_section() + musique_section() + heldout_section() + untitled_section() + tolerance_section()
            + oracle_musique_section() + cirag_oracle_section())
    if queries:
        def ratio(method: str) -> float:
            return float(queries["methods"][method]["p50_to_dense"])

        def stage(method: str, name: str) -> float:
            return float(queries["methods"][method]["stage_ms_mean"][name])

        out += ["## Query latency (`pgrag bench queries`)", "", "```", COMMANDS["queries"], "```", "",
                f"{queries['questions']} questions, k = {queries['k']}, after {queries['warmup']} warm-up "
                f"questions per method; methods take turns on each question. Milliseconds, including "
                f"embedding the question; one run on a quiet machine, the model runtime's cache off. "
                f"threadrag {ratio('threadrag'):.2f}× dense, tigrag {ratio('tigrag'):.2f}×. tigrag encodes its "
                f"question and, in one call a hop, "
                f"the hop's remaining part with each of at most 8 bridges (issue 44), waiting "
                f"{stage('tigrag', 'embed'):.1f} ms for them while its PPR expansions (two, and a third for "
                f"36 of the 111 questions, those with terms still unanswered after two hops) take "
                f"{stage('tigrag', 'expand'):.1f} ms: the 2Wiki graph (35,440 tokens, 1.02 M entries) is so "
                f"connected that push does as much work as 5 full sweeps per hop.", "",
                "With `PGRAG_EMBEDDING_PRECISION=bfloat16` (docs/settings.md; the model in bfloat16 on this "
                "AMX CPU), the same command (`--out docs/benchmarks/queries_bf16.json`, in runs.json): dense 10.0 ms, "
                "tigrag "
                "44.6 ms (4.48×; its embedding 23.3 ms against 31.6 in float32 that day, before tigrag encoded while "
                "it ranks), threadrag 29.9 ms (3.01×): every method "
                "is faster, but the ratios are not better, because dense gains as much. Recall with "
                "bfloat16 questions over this corpus's float32 passages (`PGRAG_EMBEDDING_PRECISION=bfloat16 "
                "pgrag eval ... --methods dense,hybrid,tigrag,threadrag,tigrag-paper --out "
                "docs/benchmarks/eval_bf16.json`, in runs.json), R@2 / R@5: dense 52.2 / 64.2 and threadrag "
                "61.7 / 78.2 "
                "(equal), hybrid 58.6 / 68.0 (58.1 / 68.0), tigrag-paper 61.7 / 79.3 (61.3 / 78.8), tigrag "
                "69.1 / 84.5 (69.4 / 84.5: one supporting passage fewer at 2). So it stays off by default. "
                "Passages encode 108 → 340 a second (256 2Wiki passages, batches of 32, a one-off probe); "
                "a corpus ingested in bfloat16 has not been evaluated.", "",
                "| method | p50 ms | p95 ms | p50 / dense p50 |", "|---|---|---|---|"]
        for name, m in queries["methods"].items():
            out.append(f"| {name} | {m['latency_ms_p50']:.1f} | {m['latency_ms_p95']:.1f} | {m['p50_to_dense']:.2f} |")
        out.append("")
        for name, m in queries["methods"].items():
            stages = m.get("stage_ms_mean") or {}
            if name not in ("dense", "bm25", "hybrid") and len(stages) > 1:
                total = sum(stages.values())
                parts = ", ".join(f"{stage} {ms:.1f} ms ({ms / total:.0%})" for stage, ms in stages.items())
                out.append(f"Where `{name}` spends its time (mean per query): {parts}.")
                out.append("")
    rare = load("threadrag_rare_terms")
    if rare:
        out += [rare_terms_paragraph(rare), ""]
    terms = load("threadrag_node_terms")
    if terms:
        out += [node_terms_paragraph(terms), ""]
    sql, costs, answers = load("sql_vs_python"), load("inserver_costs"), load("answer_overhead")
    if sql:
        out += ["## SQL vs Python (`pgrag bench queries --via both`)", "", "```", COMMANDS["sql"], "```", "",
                "The same methods asked two ways in one run: `kb.retrieve` in the client process, and "
                "`pgrag.retrieve` from a plain psycopg connection, which runs the same method code inside "
                f"the server (PL/Python over SPI). The bundled sample ({sql['documents']} passages, "
                f"{sql['questions']} questions, k = {sql['k']}); measured while other test and benchmark "
                "processes shared the 2 cores (load average 10-14), so read the agreement and the ratios, "
                "not the milliseconds.", "",
                "| method | same chunks, SQL vs Python | p50 ms Python | p50 ms SQL | p50 SQL / Python |",
                "|---|---|---|---|---|"]
        for name, same in sql["same_chunks"].items():
            py, q = sql["methods"][name], sql["methods"][f"{name}@sql"]
            out.append(f"| {name} | {same} | {py['latency_ms_p50']:.1f} | {q['latency_ms_p50']:.1f} | "
                       f"{sql['sql_p50_to_python'][name]:.2f} |")
        out += ["", "tests/integration/test_inserver.py checks the same chunk ids and scores (within 1e-6) for "
                "every registered method, presets and ablations included.", ""]
    if costs:
        out += ["What one backend pays once for the in-server runtime (`" + COSTS + "`, same loaded machine): "
                f"importing pgrag {costs['first_bm25_ms (import pgrag)'] / 1000:.1f} s (RSS "
                f"{costs['rss_mb_fresh_backend']:.0f} → {costs['rss_mb_after_import']:.0f} MB), loading the "
                f"embedding model {costs['first_dense_ms (model load)'] / 1000:.1f} s (→ "
                f"{costs['rss_mb_after_model']:.0f} MB), loading the token graph "
                f"{costs['first_tigrag_ms (graph load)'] / 1000:.1f} s (→ {costs['rss_mb_after_graph']:.0f} MB); "
                f"{costs['rss_mb_after_every_method']:.0f} MB after every method ran. A pool that keeps its "
                "backends pays this once per backend.", ""]
    if answers:
        out += ["Answering through SQL (`pgrag.answer`) against Python (`kb.answer`), with the scripted "
                "OpenAI-compatible server of the tests (`" + ANSWERS + "`; fresh questions, so no cached "
                "replies; same loaded machine):", "",
                "| method | p50 ms Python | p50 ms SQL | SQL - Python ms |", "|---|---|---|---|"]
        for name, m in answers.items():
            out.append(f"| {name} | {m['python_p50_ms']:.1f} | {m['sql_p50_ms']:.1f} | "
                       f"{m['sql_minus_python_ms']:+.1f} |")
        out += ["", "A run just before gave t2rag +447 ms, threadrag -53 ms, cirag +45 ms, before the server "
                "kept its OpenAI client between calls; with this much noise the overhead is within a few "
                "hundred ms either way, and no figure here shows a cost of the SQL path.", ""]
    if graph:
        out += ["## Token graph and PPR (`pgrag bench graph`)", "", "```", COMMANDS["graph"], "```", "",
                f"The 2Wiki token graph has {graph['nodes']:,} tokens and {graph['edges']:,} edges; building "
                f"its CSR matrix from the database (binary COPY, scipy) took {graph['csr_build_seconds']:.2f} s. "
                f"PPR (damping {graph['damping']}, tolerance {graph['tolerance']}, top {graph['gamma']}) on the "
                f"seeds of {graph['questions']} questions: scipy p50 {graph['ppr_scipy_ms_p50']:.1f} ms, "
                f"SQL (`pgrag.ppr`) p50 {graph['ppr_sql_ms_p50']:.0f} ms, {graph['sql_to_scipy']}x slower; "
                f"the top tokens agreed on {graph['same_top_tokens']} of {graph['questions']} questions, "
                f"largest score difference {graph['max_score_difference']:.1e}.", ""]
    follow = load("follow")
    if follow:
        t, w = follow["trigger"], follow["throughput"]
        out += ["## Following an application table (`pgrag bench follow`)", "", "```", COMMANDS["follow"], "```", "",
                f"Trigger overhead: one UPDATE of an attached column on all {t['rows']:,} rows of an "
                f"application table (best of {t['repeat']}, each rolled back) took "
                f"{t['update_seconds_without'] * 1000:.0f} ms without an attachment and "
                f"{t['update_seconds_with'] * 1000:.0f} ms with one: **{t['overhead_us_per_row']:.0f} µs per "
                f"application row** ({t['ratio']:.1f}x the bare UPDATE, which rewrites short rows). An UPDATE "
                f"of a column that is not attached: {t['other_column_seconds_without'] * 1000:.0f} ms without, "
                f"{t['other_column_seconds_with'] * 1000:.0f} ms with ({t['other_column_ratio']:.2f}x; the "
                f"trigger's WHEN clause skips the call).", "",
                f"Worker throughput: the first {w['documents']} 2Wiki passages indexed by `pgrag ingest` and by the "
                f"worker from an attached table (batches of {w['batch_size']}; runs in the order ingest, worker, "
                f"worker, ingest, best of each): ingest {w['ingest_docs_per_second']} documents/s, worker "
                f"{w['worker_docs_per_second']} documents/s, **worker / ingest = "
                f"{w['worker_to_ingest_throughput']:.2f}** (the goal: within 10%). Seconds per run: ingest "
                f"{', '.join(str(x) for x in w['ingest_seconds'])}; worker "
                f"{', '.join(str(x) for x in w['worker_seconds'])}."]
        if "worker_non_model_seconds" in w:
            out += ["", f"Outside spaCy and the embedding model (the same work in both), seconds per run: ingest "
                    f"{', '.join(str(x) for x in w['ingest_non_model_seconds'])}; worker "
                    f"{', '.join(str(x) for x in w['worker_non_model_seconds'])} (load average "
                    f"{w['load_average_after'][0]} on {follow['machine']['cpus']} CPUs when the runs ended: the "
                    f"machine is shared, so the spread between runs of one kind is the noise floor)."]
        out.append("")
    if ingest:
        out += ["## Ingest (`pgrag bench ingest`)", "", "```", COMMANDS["ingest"], "```", "",
                f"{ingest['documents']} documents → {ingest['sentences']} sentences, {ingest['chunks']} chunks, "
                f"{ingest['entities']} entities in {ingest['total_seconds']:.0f} s "
                f"({ingest['docs_per_second']} documents/s on {ingest['machine'].get('cpus', '?')} CPUs).", "",
                "| stage | seconds in its calls | of the total |", "|---|---|---|"]
        for label, key in (("embedding (MiniLM, in the model runtime)", "embedding_seconds"),
                           ("spaCy (sentences, NER)", "nlp_seconds"),
                           ("the writing thread (SQL indexing, COPY, chunking)", "other_seconds")):
            out.append(f"| {label} | {ingest[key]:.1f} | {ingest[key] / ingest['total_seconds']:.0%} |")
        out.append("")
        if ingest["embedding_seconds"] + ingest["nlp_seconds"] + ingest["other_seconds"] > ingest["total_seconds"] + 1:
            out += ["The stages overlap (two batches prepared ahead of the writes, one parsing while the other "
                    "embeds: docs/SCALING.md, \"Ingest through the runtime\"), so they add up to more than the "
                    "total.", ""]
    if ingest and with_nodes:
        out += ["With ThreadRAG's semantic nodes (`" + COMMANDS["ingest_threadrag"] + "`): "
                f"{with_nodes['semantic_nodes']} nodes, {with_nodes['total_seconds']:.0f} s in all, of which "
                f"{with_nodes['node_embedding_seconds']:.0f} s embedding sentences and nodes; a corpus that does not "
                "ask for them (the default) saves that.", ""]
    runs = json.loads(RUNS.read_text(encoding="utf-8")) if RUNS.exists() else {}
    out += ["## Data", "", "Every file of docs/benchmarks is listed here (tests/unit/test_docs.py checks it). "
            "This page is rendered by `python scripts/benchmarks.py` from "
            + ", ".join(f"`{name}`" for name in sorted(set(READ))) + "; `recall.png` is the eval command's "
            "chart. `runs.json` holds the runs that docs/SCALING.md and this page quote by hand, one key per run, "
            "named after the file its command wrote (`python scripts/benchmarks.py --fold FILE` moves such a "
            "file in): " + ", ".join(f"`{name}`" for name in runs) + ".", ""]
    return "\n".join(out)


def dump_runs(value: object, indent: str = "") -> str:
    """runs.json's text: one key or item a line, but a list of plain values on one line
    (an interval, a command's options), which keeps the folder within its size limit."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dump_runs(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + dump_runs(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False)


def fold(paths: list[Path]) -> None:
    """Move measured runs that the docs quote by hand into runs.json, each under its file's stem."""
    runs = json.loads(RUNS.read_text(encoding="utf-8")) if RUNS.exists() else {}
    for path in paths:
        runs[path.stem] = json.loads(path.read_text(encoding="utf-8"))
    RUNS.write_text(dump_runs(runs) + "\n", encoding="utf-8")
    for path in paths:
        if path.resolve() != RUNS.resolve():
            path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", nargs="*", choices=[*COMMANDS, "oracle", "oracle-full"], default=None,
                        help="measure these parts (all when none named) before rendering")
    parser.add_argument("--fold", nargs="+", type=Path, default=None, metavar="FILE",
                        help="move these JSON runs into docs/benchmarks/runs.json (key: the file's stem)")
    args = parser.parse_args()
    if args.fold:
        fold(args.fold)
    if args.run is not None:
        OUT.mkdir(parents=True, exist_ok=True)
        run(args.run or [*COMMANDS, "oracle", "oracle-full"])
    DOC.write_text(render() + "\n", encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
