"""The in-process ranking index of a corpus: its token graph and BM25 postings
as matrices, and the walks over them.

The tables are the truth; this is a cache of them shaped for queries, one
version at a time (the corpus's graph version). Each idea has its module:

- ``terms``: a graph's vocabulary, node index <-> term, as mappable arrays;
- ``graph``: the token co-occurrence graph as a sparse matrix, read from the tables;
- ``sweep``: a sparse product on several threads, for the sweeps over a large graph;
- ``pagerank``: Personalized PageRank, by power iteration and by forward push;
- ``energy``: ThreadRAG's energy diffusion over a small weighted graph;
- ``vectors``: the chunks' embeddings in memory, for cosines and exact search;
- ``postings``: BM25 postings as a chunk × token matrix, TIGRAG's pool and BM25 rankings;
- ``delta``: a change laid over a cached version, and the fold into a new base;
- ``shared_files``: one copy per machine of a version's arrays, as mapped files;
- ``cache``: this process's graph and postings per corpus, kept current (``ranking_index``).

Nothing is imported here: a caller imports the module it needs, so that the
in-server code pays only for what a statement uses.
"""
