"""Set-up that the scripts share: where the repository, the 2Wiki benchmark and
the bundled sample are, and the repository first on ``sys.path`` (so that a
script run as ``python scripts/X.py`` imports this checkout's ``pgrag`` and the
test helpers it reuses, ``tests.*``). Import it before ``pgrag``:

    import common  # noqa: F401  (sets sys.path)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "bench" / "2wiki"      # ../shared/bench/2wiki beside the checkout
SAMPLE = ROOT / "pgrag" / "data" / "sample_corpus.json"  # the demo's bundled corpus
QUESTION = "When did Lothair II's mother die?"          # the sample's first question

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def rss_mb(pid: int) -> float:
    """Resident memory of a process, in MB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
