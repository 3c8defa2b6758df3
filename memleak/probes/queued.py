"""What a queue keeps that its consumer has not taken: the items put() on a queue between processes
or threads, and the tasks a thread pool has not run. The walk names them by the queue.
"""

from __future__ import annotations

import gc
import multiprocessing.queues
import queue
from typing import Any

#: multiprocessing's queues: put() hands each item to a feeder thread that sends it to the reading
#: process; until then (no reader, a slow one, a full pipe) this process keeps it in `_buffer`.
MP_QUEUES = (multiprocessing.queues.Queue,)
MP_QUEUE_NOTE = "put on a multiprocessing.Queue that nothing empties: kept until its feeder thread sends it"
THREAD_QUEUE_NOTE = "put on a queue between threads and not yet taken by get(): kept until a consumer takes it"
EXECUTOR_NOTE = "submitted to a ThreadPoolExecutor and not yet run: kept, with its arguments, until a worker runs it"


def queue_items(obj: Any) -> tuple[list, str, str] | None:
    """(items, holder kind, note) of a queue between processes (what its feeder thread has not sent
    yet, in `_buffer`) or between threads (a `queue.Queue` or `SimpleQueue`: what get() has not
    taken: a consumer that died or is slower than the loop; an executor's `_work_queue`: the tasks
    its workers have not run, each as what it keeps: its function and arguments); None for
    anything else."""
    if isinstance(obj, MP_QUEUES):
        return list(getattr(obj, "_buffer", ())), "mp_queue", MP_QUEUE_NOTE
    if isinstance(obj, queue.Queue):
        return list(getattr(obj, "queue", ())), "thread_queue", THREAD_QUEUE_NOTE
    if isinstance(obj, queue.SimpleQueue):  # a C type: its items are the one list it refers to
        items = next((r for r in gc.get_referents(obj) if type(r) is list), [])
        tasks = [(w.fn, w.args, w.kwargs) for w in items if _is_work_item(w)]
        if tasks:
            return tasks, "executor_queue", EXECUTOR_NOTE
        return list(items), "thread_queue", THREAD_QUEUE_NOTE
    return None


def _is_work_item(obj: Any) -> bool:
    """A task a `concurrent.futures.ThreadPoolExecutor` queued (its private `_WorkItem`)."""
    t = type(obj)
    return t.__module__ == "concurrent.futures.thread" and t.__name__ == "_WorkItem" and hasattr(obj, "args")
