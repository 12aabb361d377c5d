"""What a second process adds to the machine's memory for a corpus's graph and
postings, with the shared graph files (pgrag.graph_files) and without them.

    python scripts/shared_graph_memory.py --corpus-file ../shared/bench/2wiki/corpus.json --out mem.json

Each measured process connects, imports and warms everything else first, then
loads the ranking index (graph + postings) and runs one multi-hop TIGRAG query;
the figure is the growth of its anonymous resident memory (RssAnon: what the
process alone adds to the machine; mapped files are the page cache, one copy for
every process) over the load, and over the load plus that query. With the files on, a first process publishes the version
before the measured ones run; with them off each process reads the database.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, sys, time, pgrag
from pgrag.bench.evaluate import prepare_corpus
from pathlib import Path
db = pgrag.connect()
kb, _ = prepare_corpus(db, Path(sys.argv[1]), progress=False)
kb.retrieve("warm up the model", method="dense", k=1)
def anon():
    # Anonymous resident memory: what this process alone adds to the machine. Its
    # file-backed pages (the mapped graph) are the page cache, one copy for all.
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
before = anon()
t0 = time.perf_counter()
from pgrag.postings import ranking_index
index = ranking_index(db, kb.id)
seconds = time.perf_counter() - t0
loaded = anon()
kb.retrieve("When did Lothair II's mother die?", method="tigrag", k=5)
after = anon()
g, p = index.graph, index.postings
size = (g.transition.data.nbytes + g.transition.indices.nbytes + g.transition.indptr.nbytes
        + g.terms.by_node.nbytes + g.index.sorted_terms.nbytes + g.index.order.nbytes + g.token_ids.nbytes
        + g.degree.nbytes + g.dangling.nbytes + p.nbytes)
print(json.dumps({"source": index.source, "anon_growth_mb": (loaded - before) / 2**20,
                  "anon_growth_with_first_query_mb": (after - before) / 2**20,
                  "index_mb": size / 2**20, "load_seconds": seconds}))
"""


def child(corpus_file: Path, graph_dir: str) -> dict:
    env = {**os.environ, "PGRAG_GRAPH_DIR": graph_dir}
    out = subprocess.run([sys.executable, "-c", CHILD, str(corpus_file)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-file", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    shared = os.environ.get("PGRAG_GRAPH_DIR", "")
    publisher = child(args.corpus_file, shared)            # writes the files if this version has none
    with_files = [child(args.corpus_file, shared) for _ in range(2)]
    without = [child(args.corpus_file, "off") for _ in range(2)]
    report = {"publisher": publisher, "with_files": with_files, "without_files": without,
              "second_process_share_of_index": round(with_files[1]["anon_growth_with_first_query_mb"]
                                                   / with_files[1]["index_mb"], 3)}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
