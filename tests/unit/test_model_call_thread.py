"""A runtime call started in a thread (model_client.background) and the
backend's waiter (model_client.waiting): the waiter runs plpy, so only the
thread that registered it may use it; the call's thread goes without, and the
registering thread waits for the result through it."""

from __future__ import annotations

import threading

import pytest

from pgrag import model_client


def test_the_calls_thread_never_uses_the_waiter_and_the_caller_waits_through_it():
    used_by: list[int] = []
    release = threading.Event()

    def wait(work):   # the call is still waiting for this: result() must come here
        used_by.append(threading.get_ident())
        release.set()
        return work()

    def call():
        release.wait(5)
        return model_client._waiter_here(), threading.get_ident()

    with model_client.waiting(wait):
        result = model_client.background(call)
        assert model_client._waiter_here() is wait
        waiter_in_call, call_thread = result()
        assert result() == (waiter_in_call, call_thread)   # asked again: the same result, no second call
    assert waiter_in_call is None and call_thread != threading.get_ident()
    assert used_by == [threading.get_ident()]


def test_the_calls_error_reaches_the_caller():
    def call():
        raise model_client.ModelRuntimeUnavailable("the runtime went away")

    result = model_client.background(call)
    with pytest.raises(model_client.ModelRuntimeUnavailable, match="went away"):
        result()
