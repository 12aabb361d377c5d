"""What answering through SQL costs against Python, per method, with a scripted
OpenAI-compatible server on 127.0.0.1 (so LLM time does not dominate).

    .venv/bin/python scripts/answer_overhead.py [--questions 5] [--out FILE]

For each method and each question (fresh text every time, so neither side reads
the other's cached replies), ``kb.answer`` in this process and ``pgrag.answer``
from a plain psycopg connection take turns; one untimed warm-up each first.
Reports p50 per side and the SQL - Python difference.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import psycopg
from common import SAMPLE as DATA

import pgrag
from pgrag.bench.evaluate import prepare_corpus
from pgrag.bench.metrics import percentile
from pgrag.llm import LLMSettings
from tests.fake_llm import FakeLLM  # the scripted server of the tests
from tests.integration.test_answer_sql import every_method_script


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    db = pgrag.connect()
    kb, _ = prepare_corpus(db, DATA, extract="spacy", progress=False, methods=["threadrag"])
    out: dict[str, dict[str, float]] = {}
    with FakeLLM(every_method_script) as server, psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('pgrag.llm_base_url', %s, false), set_config('pgrag.llm_model', "
                     "'fake-model', false)", (server.base_url,))
        llm = kb.llm(LLMSettings(base_url=server.base_url, model="fake-model"))
        for method in ("t2rag", "threadrag", "cirag"):
            times: dict[str, list[float]] = {"python": [], "sql": []}
            for i in range(args.questions + 1):
                for side in ("python", "sql"):
                    question = f"Who was the mother of Lothair II, {side} {method} {i} {time.time_ns()}?"
                    t0 = time.perf_counter()
                    if side == "python":
                        kb.answer(question, method=method, llm=llm)
                    else:
                        conn.execute("SELECT answer FROM pgrag.answer(%s, %s, %s)", (kb.name, question, method))
                    if i:   # the first round warms both sides up
                        times[side].append((time.perf_counter() - t0) * 1000)
            py, sq = percentile(times["python"], 50), percentile(times["sql"], 50)
            out[method] = {"python_p50_ms": round(py, 1), "sql_p50_ms": round(sq, 1),
                           "sql_minus_python_ms": round(sq - py, 1)}
    print(json.dumps(out, indent=2))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    db.close()


if __name__ == "__main__":
    main()
