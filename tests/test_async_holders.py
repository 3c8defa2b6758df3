"""Tensors kept in C++ by what an asynchronous call returns: a finished collective's Work
(``dist.all_reduce(t, async_op=True)``) and a done torch Future. The walk reads a finished one's
value and never waits on one still running."""
from __future__ import annotations

import sys

import pytest
import torch
import torch.distributed as dist
from torch import nn

from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages
from scenarios._common import gloo_group_of_one


def _walk(frame):
    return walk_roots(step=3, model=None, optimizer=None, ages=Ages(), exclude=set(), frames=[frame])


def _done(value):
    fut = torch.futures.Future()
    fut.set_result(value)
    return fut


def test_done_futures_in_a_list_are_counted_under_the_list():
    futures = [_done(torch.ones(64)) for _ in range(3)]
    st = _walk(sys._getframe()).holders["futures"]
    assert st.count == 3 and st.nbytes == 3 * 64 * 4


def test_a_future_still_running_is_not_read_and_not_waited_on():
    running = [torch.futures.Future()]
    walk = _walk(sys._getframe())  # would block for ever if it waited
    assert "running" not in walk.holders or walk.holders["running"].count == 0
    running[0].set_result(torch.ones(8))
    assert _walk(sys._getframe()).holders["running"].count == 1


@pytest.mark.skipif(not dist.is_available(), reason="torch without torch.distributed")
def test_the_futures_of_finished_collectives_kept_in_a_list_name_the_list():
    with gloo_group_of_one():
        futs = [dist.all_reduce(torch.ones(16), async_op=True).get_future() for _ in range(3)]
        torch.futures.wait_all(futs)
        st = _walk(sys._getframe()).holders["futs"]  # C futures (torch.Future), not torch.futures.Future
    assert st.count == 3


@pytest.mark.skipif(not dist.is_available(), reason="torch without torch.distributed")
def test_finished_collectives_kept_in_a_list_name_the_list():
    handles = []
    with gloo_group_of_one():
        for _ in range(4):
            handles.append(dist.all_reduce(nn.Linear(8, 8).weight.detach().clone(), async_op=True))
        for work in handles:
            work.wait()
        st = _walk(sys._getframe()).holders["handles"]
    assert st.count == 4 and st.nbytes == 4 * 8 * 8 * 4


def test_finished_thread_pool_results_kept_in_a_list_name_the_list():
    # multiprocessing's package is skipped by the walk: a finished AsyncResult's value is read as a
    # finished future's is, a pending one is not waited on
    import threading
    from multiprocessing.pool import ThreadPool

    gate = threading.Event()
    with ThreadPool(1) as pool:
        results = [pool.apply_async(torch.ones, (64,)) for _ in range(3)]
        for r in results:
            r.wait(10)
        waiting = [pool.apply_async(gate.wait, (10,))]
        walk = _walk(sys._getframe())
        gate.set()
        waiting[0].wait(10)
    st = walk.holders["results"]
    assert st.count == 3 and st.nbytes == 3 * 64 * 4
    assert "waiting" not in walk.holders or walk.holders["waiting"].count == 0
