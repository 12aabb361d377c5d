"""Evaluation and benchmark tooling: what ``pgrag eval``, ``pgrag bench`` and the
docs' figures run. The core (ingest, retrieval, the SQL face) never imports it.

- ``evaluate``: every method side by side on one corpus (Recall@k, EM/F1, latency, tokens);
  ``metrics`` the scores, ``report`` their Markdown table and chart;
- ``oracle``: an ideal reader for the answering methods' loops;
- ``timing``: ``pgrag bench ingest / queries / graph / load / follow``;
- ``scale``: the corpus grown 1x-20x (``pgrag bench scale``);
- ``filters``: metadata filters on the eval corpus (``pgrag bench filters``);
- ``trajectories``: CIRAG runs as fine-tuning records;
- ``datasets``: published question sets as an eval corpus and questions (``pgrag bench convert``).
"""
