"""ThreadRAG's graph and Energy-Driven Pathfinding on small hand-made graphs."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from pgrag.index.energy import propagate_energy, reachable
from pgrag.methods.threadrag_graph import Node, build_edges, entity_match, linearise, pathfind
from pgrag.methods.threadrag_settings import ThreadragSettings


def node(i, doc, ordinal, vec, keys=(), text="", title="T"):
    v = np.asarray(vec, dtype=np.float64)
    return Node(node_id=i, document_id=doc, title=title, ordinal=ordinal, char_start=10 * ordinal,
                char_end=10 * ordinal + 9, text=text or f"n{i}", embedding=v / np.linalg.norm(v),
                keys=frozenset(keys))


def chain(n):
    w = sp.lil_matrix((n, n))
    for i in range(n - 1):
        w[i, i + 1] = w[i + 1, i] = 1.0
    return w.tocsr()


def test_energy_on_a_path_by_hand():
    # a - b - c, all energy at a, decay 0.5, two rounds:
    # round 1: a passes 0.5 to b (its only neighbour)
    # round 2: b passes 0.5 * 0.5 = 0.25, split equally between a and c
    e = propagate_energy(chain(3), np.array([1.0, 0.0, 0.0]), decay=0.5, steps=2)
    assert e == pytest.approx([1.125, 0.5, 0.125])


def test_energy_splits_by_edge_weight_and_sums_over_anchors():
    w = sp.csr_matrix(np.array([[0, 3, 1], [3, 0, 0], [1, 0, 0]], dtype=float))
    e = propagate_energy(w, np.array([1.0, 0.0, 0.0]), decay=0.4, steps=1)
    assert e == pytest.approx([1.0, 0.3, 0.1])
    both = propagate_energy(w, np.array([1.0, 1.0, 0.0]), decay=0.4, steps=1)
    assert both == pytest.approx(e + propagate_energy(w, np.array([0.0, 1.0, 0.0]), decay=0.4, steps=1))


def test_reachable_only_through_kept_nodes():
    w = chain(5)
    keep = np.array([True, True, False, True, True])
    assert reachable(w, [0], keep).tolist() == [True, True, False, False, False]
    assert reachable(w, [0, 4], keep).tolist() == [True, True, False, True, True]


def test_edge_kinds():
    nodes = [node(1, 10, 0, [1, 0, 0], {"paris"}), node(2, 10, 1, [0, 1, 0], {"paris"}),
             node(3, 20, 0, [1, 0.1, 0], {"paris", "louvre"}), node(4, 30, 0, [0, 0, 1], {"louvre", "seine"})]
    stored = [(1, 2, "narrative", 1.0)]
    edges = build_edges(nodes, stored, ThreadragSettings(semantic_top_m=1, semantic_threshold=0.9,
                                                         lexical_saturation=2))
    got = {(e.a, e.b, e.kind): e.strength for e in edges}
    assert got[(0, 1, "narrative")] == 1.0
    # node 0 and node 2 are each other's nearest neighbour, cosine ~0.995; nothing else passes 0.9
    assert [k for k in got if k[2] == "semantic"] == [(0, 2, "semantic")]
    assert got[(0, 2, "semantic")] == pytest.approx(1 / np.sqrt(1.01))
    # lexical: only across documents; strength = shared keys / saturation, capped at 1
    lexical = {k[:2]: v for k, v in got.items() if k[2] == "lexical"}
    assert lexical == {(0, 2): 0.5, (1, 2): 0.5, (2, 3): 0.5}


def test_entity_match_reads_title_and_text():
    n = node(1, 1, 0, [1, 0], text="He married Teutberga.", title="Lothair II")
    assert entity_match(n, ["Lothair II", "teutberga", "Boso"]) == pytest.approx(2 / 3)
    assert entity_match(n, []) == 0.0


def test_pathfind_prunes_and_linearises_by_relevance_then_narrative_order():
    # doc 10: nodes 0-1-2 (narrative chain); doc 20: node 3, linked to node 2; doc 30: node 4, isolated
    nodes = [node(1, 10, 0, [1, 0]), node(2, 10, 1, [1, 0]), node(3, 10, 2, [1, 0]),
             node(4, 20, 0, [0, 1]), node(5, 30, 0, [0, 1])]
    w = sp.lil_matrix((5, 5))
    for a, b in ((0, 1), (1, 2), (2, 3)):
        w[a, b] = w[b, a] = 1.0
    scores = np.array([0.1, 0.2, 0.9, 0.3, 0.05])
    settings = ThreadragSettings(anchors=1, decay=0.5, steps=2, threshold=0.05)
    found = pathfind(nodes, w.tocsr(), scores, np.ones(5), settings)
    assert found.anchors == [2]
    # from node 2 (energy 1): round 1 gives 0.25 to each of nodes 1 and 3; round 2: node 1
    # passes 0.125, half to 0 and half to 2; node 3 passes 0.125, all back to 2
    assert found.energy == pytest.approx([0.0625, 0.25, 1.1875, 0.25, 0.0])
    assert found.kept.tolist() == [True, True, True, True, False]      # node 4: no energy, unreachable
    assert [(p.document_id, p.ordinals) for p in found.paths] == [(10, (0, 1, 2)), (20, (0,))]
    assert found.paths[0].char_start == 0 and found.paths[0].char_end == 29
    higher = pathfind(nodes, w.tocsr(), scores, np.ones(5), ThreadragSettings(
        anchors=1, decay=0.5, steps=2, threshold=0.1))
    assert higher.kept.tolist() == [False, True, True, True, False]     # 0.0625 < 0.1: pruned
    assert [(p.document_id, p.ordinals) for p in higher.paths] == [(10, (1, 2)), (20, (0,))]


def test_energy_from_two_anchors_orders_documents_by_relevance():
    nodes = [node(i + 1, 10 * (i + 1), 0, [1, 0]) for i in range(4)]
    w = sp.lil_matrix((4, 4))
    w[0, 1] = w[1, 0] = 1.0
    w[2, 3] = w[3, 2] = 1.0
    # two anchors in separate components; node 3 gets energy from node 2, node 1 from node 0
    found = pathfind(nodes, w.tocsr(), np.array([0.9, 0.0, 0.1, 0.0]), np.ones(4),
                     ThreadragSettings(anchors=2, decay=0.5, steps=1, threshold=0.01))
    assert found.anchors == [0, 2]
    assert found.energy == pytest.approx([0.9, 0.45, 0.1, 0.05])
    assert [p.document_id for p in found.paths] == [10, 20, 30, 40]   # documents by relevance


def test_linearise_splits_non_consecutive_runs():
    nodes = [node(i + 1, 10, i, [1, 0]) for i in range(4)]
    paths = linearise(nodes, np.array([0.5, 0.4, 0.0, 0.3]), np.array([True, True, False, True]))
    assert [p.ordinals for p in paths] == [(0, 1), (3,)]
    assert all(p.energy == 0.5 for p in paths)


def test_capitalised_names_complete_spacy():
    from pgrag.methods.threadrag_agent import capitalised_names, merge_names

    assert capitalised_names("Who was the mother of Lothair II?") == ["Lothair II"]
    assert capitalised_names("Which film came out first, The Love Route or Engal Aasan?") == \
        ["Love Route", "Engal Aasan"]
    assert merge_names(["Nicki Minaj"], ["Nicki Minaj", "Minaj", "Lil Wayne"]) == ["Nicki Minaj", "Lil Wayne"]
