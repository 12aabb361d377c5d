"""The model runtime's queue: which texts a model call takes and in which order
(Batcher), the vectors of short texts it keeps (VectorCache), and its counters
(Stats). pgrag.model_service serves them over HTTP."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Stats:
    requests: int = 0
    dated: int = 0      # requests that said when their caller's request began (one_request)
    texts: int = 0
    batches: int = 0
    largest_batch: int = 0
    queued: int = 0
    errors: int = 0
    cached: int = 0     # texts answered from the VectorCache
    started: float = field(default_factory=time.time)

    def count(self, texts: list[str], began: float | None) -> None:
        self.requests += 1
        self.dated += began is not None
        self.texts += len(texts)


SHORT_TEXT = 400   # characters: a batch whose texts are all this short is dealt round-robin (_split)
MIN_SPLIT = 4   # texts: a batch is split among idle workers only into parts this large
MAX_AGE = 60.0   # seconds: how far back a request's claimed start counts (Batcher.run)


def _split(live: list[tuple[Any, Any]], parts: int) -> list[list[tuple[Any, Any]]]:
    """A batch's texts (queued longest first) in ``parts`` for idle workers.
    Short texts (questions and names) are dealt round-robin: cut in runs, one
    worker got all of a request's long texts and the request waited for it
    (TIGRAG's second-hop texts replayed against the runtime: 5 to 15 ms a
    question faster dealt). Passages are cut in runs: two workers encoding
    long passages at once contend for the cache (1,500 2Wiki documents
    ingested in 41 s with runs, 51 s dealt)."""
    longest = max((len(item) for item, _ in live if isinstance(item, str)), default=0)
    if longest <= SHORT_TEXT:
        return [live[i::parts] for i in range(parts)]
    size = -(-len(live) // parts)
    return [live[start:start + size] for start in range(0, len(live), size)]


CACHED_CHARS = 400   # characters: longer texts (passages, read once at ingest) are not cached


class VectorCache:
    """The vectors of the last ``size`` short texts the runtime encoded, least
    recently used out: a question asked again, and the second-hop texts it
    makes (the same remaining part with the same names), cost no model call.
    Only texts of at most CACHED_CHARS characters: an ingest's passages would
    push every question out. Used from the event loop's thread only."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[str, Any] = OrderedDict()

    def get(self, text: str) -> Any | None:
        vector = self.items.get(text)
        if vector is not None:
            self.items.move_to_end(text)
        return vector

    def resize(self, size: int) -> None:
        """Keep at most ``size`` texts from now on (0: none), the least recent out."""
        self.size = size
        while len(self.items) > size:
            self.items.popitem(last=False)

    def put(self, text: str, vector: Any) -> None:
        if self.size == 0 or len(text) > CACHED_CHARS:
            return
        self.items[text] = vector.copy()   # a row of its batch's array would keep the whole batch
        self.items.move_to_end(text)
        if len(self.items) > self.size:
            self.items.popitem(last=False)


class Batcher:
    """Runs ``work`` on batches of queued texts, the oldest request's first: a
    batch holds at most ``max_batch`` texts, the first text waits at most
    ``window`` seconds for company, and at most ``workers`` model calls run at
    once (on ``executor``). A batch that finds several workers idle is split
    among them, so one request's texts use every core.

    ``mix``: whether one batch may hold several requests' texts. On torch it
    should (a call's overhead is what batching saves); on ONNX Runtime a text
    costs the same alone or batched, and a question that joined another
    request's batch would wait for all of that batch's texts."""

    def __init__(self, work: Callable[[list[Any]], list[Any]], executor: ThreadPoolExecutor, stats: Stats, *,
                 window: float, max_batch: int, workers: int = 1, mix: bool = True) -> None:
        self.work, self.executor, self.stats = work, executor, stats
        self.window, self.max_batch, self.workers, self.mix = window, max_batch, max(1, workers), mix
        # (when its request began, its request, arrival, item, future): a heap, the oldest request first
        self.queue: list[tuple[float, int, int, Any, asyncio.Future[Any]]] = []
        self.queued = asyncio.Event()
        self.numbers = itertools.count()
        self.task: asyncio.Task[None] | None = None
        self.calls: set[asyncio.Task[None]] = set()

    async def run(self, items: list[Any], began: float | None = None) -> list[Any]:
        """The results of ``items``. ``began``: when the request they belong to
        began (time.time(), pgrag.model_client.one_request); their texts go
        before those of requests that began later, so a multi-hop question's
        second hop is not queued behind the questions that arrived meanwhile.
        Without it the request begins now (first come, first served)."""
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._loop())
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in items]
        now = time.time()
        # a claimed start is at most MAX_AGE back: no caller goes ahead for ever
        key = now if began is None else min(now, max(began, now - MAX_AGE))
        request = next(self.numbers)
        # Longest first: a large request (an ingest batch) then fills each model
        # call with texts of about one length, as an in-process encode sorts them,
        # instead of padding short texts to a long one's length.
        order = sorted(range(len(items)), key=lambda i: -len(items[i])) if len(items) > 1 else range(len(items))
        for i in order:
            heapq.heappush(self.queue, (key, request, next(self.numbers), items[i], futures[i]))
        self.stats.queued += len(items)
        self.queued.set()
        return list(await asyncio.gather(*futures))

    async def _loop(self) -> None:
        slots = asyncio.Semaphore(self.workers)
        while True:
            # A free worker first, then the queue's head: while all are busy the
            # queue grows and keeps its order, and the next call gets a larger batch.
            await slots.acquire()
            while not self.queue:
                self.queued.clear()
                await self.queued.wait()
            if self.window > 0 and len(self.queue) < self.max_batch:
                await asyncio.sleep(self.window)   # company arriving now shares the model call
            batch = self._take()
            live = [(item, f) for item, f in batch if not f.cancelled()]
            self.stats.queued -= len(batch)
            if not live:
                slots.release()
                continue
            self.stats.batches += 1
            self.stats.largest_batch = max(self.stats.largest_batch, len(live))
            parts = 1
            while parts < len(live) // MIN_SPLIT and not slots.locked():
                await slots.acquire()   # free now: no wait
                parts += 1
            for part in _split(live, parts):
                task = asyncio.get_running_loop().create_task(self._call(part, slots))
                self.calls.add(task)   # held until done: the loop keeps only weak references
                task.add_done_callback(self.calls.discard)

    def _take(self) -> list[tuple[Any, asyncio.Future[Any]]]:
        """The next batch from the queue's head: its request's texts, and others'
        too where requests mix."""
        request = self.queue[0][1]
        batch: list[tuple[Any, asyncio.Future[Any]]] = []
        while self.queue and len(batch) < self.max_batch and (self.mix or self.queue[0][1] == request):
            _, _, _, item, future = heapq.heappop(self.queue)
            batch.append((item, future))
        return batch

    async def _call(self, live: list[tuple[Any, asyncio.Future[Any]]], slots: asyncio.Semaphore) -> None:
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self.executor, self.work, [item for item, _ in live])
        except Exception as exc:  # the model failed: every caller of the batch hears why
            self.stats.errors += 1
            for _, future in live:
                if not future.done():
                    future.set_exception(exc)
            return
        finally:
            slots.release()
        for (_, future), result in zip(live, results):
            if not future.done():
                future.set_result(result)
