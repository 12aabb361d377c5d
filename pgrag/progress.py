"""Progress bars: tqdm, without its monitor thread.

tqdm starts a monitor thread with its first bar (any library's, such as a
model's loading bar) that lives as long as the process. pgrag starts no thread
that outlives the call that started it, so every module that shows a bar, or
loads a library that may, takes tqdm from here.
"""

from __future__ import annotations

from tqdm import tqdm

tqdm.monitor_interval = 0

__all__ = ["tqdm"]
