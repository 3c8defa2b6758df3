"""The trackers now running, by the thread that started each: a tracker started inside another
is warned about, a leak that both see is warned about once, and trackers that must be closed at
interpreter exit are held until they are closed, not longer.

Nested trackers both record (each its own run, its own ``on_leak``); only the log warning of a
confirmed leak is shared: the first tracker of a thread to confirm one warns, the others running
in that thread then log it at INFO level (their runs still get the ``leak_confirmed`` event).
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from pathlib import Path
from typing import Protocol

log = logging.getLogger("memleak")


class Tracker(Protocol):
    """What this bookkeeping reads of a `Tracker` (a protocol: tracker.py imports this module)."""

    out: Path | None
    level: str

    @property
    def active(self) -> bool: ...

    @property
    def leak_confirmed(self) -> bool: ...

    def close(self) -> None: ...


_lock = threading.Lock()
# thread ident -> the trackers started in that thread and not yet closed, oldest first (weakly:
# a tracker dropped without being closed must not be kept for this bookkeeping)
_running: dict[int, list[weakref.ref[Tracker]]] = {}
# trackers to close at exit if still open (watch, the Hugging Face callback): strong references,
# dropped when they close, so that a closed tracker (and its on_leak) can be collected
_close_at_exit: set[Tracker] = set()
_exit_hook_registered = False


def describe(tracker: Tracker) -> str:
    """The tracker as the user knows it: where it writes, and its level."""
    where = f"out={tracker.out}" if tracker.out is not None else "in memory"
    return f"{where}, level={tracker.level}"


def enter(tracker: Tracker) -> None:
    """Note `tracker` as running in this thread; warn when another one already is."""
    with _lock:
        group = _running.setdefault(threading.get_ident(), [])
        outer = [t for r in group if (t := r()) is not None and t.active]
        group.append(weakref.ref(tracker))
    if outer:
        log.warning(
            "memleak: a tracker is already running in this thread (%s); this one (%s) records too, "
            "and a leak both see is warned about once. Close the outer one first to measure only this block.",
            describe(outer[-1]),
            describe(tracker),
        )


def leave(tracker: Tracker) -> None:
    """Forget `tracker` (it closed), in whichever thread it was started."""
    with _lock:
        for ident, group in list(_running.items()):
            group[:] = [r for r in group if (t := r()) is not None and t is not tracker]
            if not group:
                del _running[ident]
        _close_at_exit.discard(tracker)


def warned_elsewhere(ref: weakref.ref[Tracker]) -> bool:
    """Whether another tracker running in the thread that started `ref()` already confirmed a leak."""
    tracker = ref()
    with _lock:
        for group in _running.values():
            trackers = [t for r in group if (t := r()) is not None]
            if tracker in trackers and any(t is not tracker and t.active and t.leak_confirmed for t in trackers):
                return True
    return False


def close_at_exit(tracker: Tracker) -> None:
    """Close `tracker` at interpreter exit if it is still open then (one exit hook for all)."""
    global _exit_hook_registered
    with _lock:
        _close_at_exit.add(tracker)
        if not _exit_hook_registered:
            atexit.register(_close_all)
            _exit_hook_registered = True


def _close_all() -> None:
    with _lock:
        open_ = list(_close_at_exit)
    for tracker in open_:
        try:
            tracker.close()
        except Exception as e:  # the interpreter is exiting: report and go on with the others
            log.warning("memleak: could not close the tracker (%s) at exit: %s", describe(tracker), e)
