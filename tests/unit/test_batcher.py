"""The model runtime's Batcher (pgrag.model_queue): requests that arrive
together share a model call, at most ``workers`` calls run at once, and a
batch that finds workers idle is split among them. A real thread pool runs a
work function that records each call."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pgrag.model_queue import MAX_AGE, MIN_SPLIT, SHORT_TEXT, Batcher, Stats


class Recorder:
    """A model stand-in: each call sleeps, and the calls running at once are counted."""

    def __init__(self, seconds: float = 0.05) -> None:
        self.seconds, self.lock = seconds, threading.Lock()
        self.running = self.most = 0
        self.calls: list[list[str]] = []

    def __call__(self, items: list[str]) -> list[str]:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.calls.append(list(items))
        time.sleep(self.seconds)
        with self.lock:
            self.running -= 1
        return [item.upper() for item in items]


def serve(workers: int, requests: list[list[str]], work: Recorder) -> list[list[str]]:
    async def main() -> list[list[str]]:
        with ThreadPoolExecutor(max_workers=4) as pool:
            batcher = Batcher(work, pool, Stats(), window=0.002, max_batch=64, workers=workers)
            return list(await asyncio.gather(*(batcher.run(r) for r in requests)))

    return asyncio.run(main())


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_one_request_is_split_among_idle_workers_and_answered_in_order(workers):
    work = Recorder()
    texts = [f"text {i:02d} " + "x" * (i % 5) for i in range(16)]
    [answer] = serve(workers, [texts], work)
    assert answer == [t.upper() for t in texts]
    assert len(work.calls) == workers and work.most == workers
    assert sorted(t for call in work.calls for t in call) == sorted(texts)


def test_a_split_deals_long_and_short_texts_to_every_worker():
    """A request's texts reach the queue longest first; each worker's part gets
    its share of the long ones, so no worker holds up the request alone."""
    work = Recorder()
    texts = [f"long text {i} " + "x" * 60 for i in range(8)] + [f"short {i}" for i in range(8)]
    serve(2, [texts], work)
    assert len(work.calls) == 2
    assert [sum(len(t) > 40 for t in call) for call in work.calls] == [4, 4]


def test_a_split_of_passages_keeps_runs_of_one_length():
    """Passages are cut in runs (longest first), not dealt: two workers each
    encoding long passages at once contend for the CPU's cache."""
    work = Recorder()
    texts = [f"passage {i} " + "y" * (SHORT_TEXT + 100) for i in range(8)] + [f"short {i}" for i in range(8)]
    serve(2, [texts], work)
    assert sorted(sum(len(t) > SHORT_TEXT for t in call) for call in work.calls) == [0, 8]


def test_a_small_request_is_not_split():
    work = Recorder()
    serve(2, [["one", "two", "three"][: MIN_SPLIT - 1]], work)
    assert len(work.calls) == 1


def test_many_requests_never_run_more_calls_than_workers_and_share_calls():
    work = Recorder(seconds=0.02)
    requests = [[f"r{r} t{t}" for t in range(6)] for r in range(40)]
    answers = serve(2, requests, work)
    assert answers == [[t.upper() for t in r] for r in requests]
    assert work.most == 2
    assert len(work.calls) < len(requests)   # requests waiting for a worker shared its next call


def calls_after_a_blocker(late: list[str], early: list[str], *, began: bool, mix: bool,
                          starts: tuple[float, float] | None = None) -> list[list[str]]:
    """One worker busy on a blocker while request ``late`` and then request
    ``early`` queue (``began``: early says it began a second before late;
    ``starts``: what each says instead); the calls the worker made after the
    blocker, in order."""
    gate = threading.Event()
    calls: list[list[str]] = []

    def work(items: list[str]) -> list[str]:
        calls.append(list(items))
        if items == ["blocker"]:
            gate.wait(5)
        return items

    async def main() -> None:
        with ThreadPoolExecutor(max_workers=2) as pool:
            batcher = Batcher(work, pool, Stats(), window=0.0, max_batch=64, workers=1, mix=mix)
            blocker = asyncio.ensure_future(batcher.run(["blocker"]))
            while not calls:
                await asyncio.sleep(0.001)
            now = time.time()
            said = starts or ((now, now - 1) if began else (None, None))
            queued = [asyncio.ensure_future(batcher.run(late, began=said[0]))]
            await asyncio.sleep(0.005)   # late arrives first
            queued.append(asyncio.ensure_future(batcher.run(early, began=said[1])))
            await asyncio.sleep(0.02)   # both wait behind the blocker
            gate.set()
            assert await asyncio.gather(*queued) == [late, early]
            await blocker

    asyncio.run(main())
    return calls[1:]


QUESTION = ["a question that came later"]
SECOND_HOP = ["hop text one", "hop text two", "hop text six"]


def test_the_request_that_began_first_is_served_first_alone():
    """On ONNX Runtime requests do not mix: the earlier request's second hop
    gets a call of its own before the question that arrived ahead of it."""
    assert calls_after_a_blocker(QUESTION, SECOND_HOP, began=True, mix=False) == [SECOND_HOP, QUESTION]


def test_mixed_requests_share_a_call_the_earlier_ones_texts_first():
    assert calls_after_a_blocker(QUESTION, SECOND_HOP, began=True, mix=True) == [SECOND_HOP + QUESTION]


def test_without_a_start_requests_are_served_as_they_arrive():
    assert calls_after_a_blocker(QUESTION, SECOND_HOP, began=False, mix=False) == [QUESTION, SECOND_HOP]


def test_a_claimed_start_counts_at_most_max_age_back():
    """A request that began more than MAX_AGE ago and one that claims to have
    begun in 1970 both count as MAX_AGE before they arrived: the one that
    arrived first goes first, and no caller can jump the queue for ever."""
    now = time.time()
    assert calls_after_a_blocker(["began 61 s ago"], ["claims 1970"], began=False, mix=False,
                                 starts=(now - MAX_AGE - 1, 0.0)) == [["began 61 s ago"], ["claims 1970"]]
