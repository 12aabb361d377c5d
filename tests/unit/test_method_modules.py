"""Running one method imports only its own module (pgrag.methods._module_of):
a server backend's first bm25 call does not pay for the LLM methods."""

from __future__ import annotations

import json
import subprocess
import sys

from pgrag import methods
from tests.serving import child_env

OTHERS = ("pgrag.methods.tigrag", "pgrag.methods.t2rag", "pgrag.methods.threadrag", "pgrag.methods.cirag",
          "pgrag.methods.threadrag_settings", "pgrag.methods.threadrag_retrieval", "pgrag.methods.threadrag_graph",
          "pgrag.methods.threadrag_agent", "pgrag.llm", "pgrag.prompts", "pgrag.semantic")


def test_every_builtin_method_is_found_in_the_module_named_for_it():
    for name, spec in methods.registry().items():
        module = methods._module_of(name)
        assert module is not None and spec in methods._specs(module), name
    assert methods._module_of("tigrag-nonsense") == "tigrag" and methods._module_of("nope") is None


def test_getting_bm25_imports_no_other_method():
    probe = ("import json, sys; from pgrag import methods; methods.get('bm25'); "
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pgrag'))))")
    out = subprocess.run([sys.executable, "-c", probe], env=child_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout))
    assert "pgrag.methods.bm25" in loaded and not loaded & set(OTHERS), loaded & set(OTHERS)
