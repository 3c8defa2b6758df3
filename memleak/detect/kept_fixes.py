"""Fix text for a holder by how it lives: as long as a function (a default argument, a closure),
a registry, a running thread, a queue, an optimizer, a hook, a chain of objects, or TorchScript's
compilation unit (`culprit_fixes` picks it for holders of these kinds)."""

from __future__ import annotations


def kept_fix(holder: str, hkind: str, grad: str) -> str:
    """The fix for `holder` where its kind says how it lives, else ''."""
    return _chain_fix(holder, hkind, grad) or _kind_fix(holder, hkind, grad) or jit_fix(holder, hkind)


#: Fixes by holder kind ({holder}, {grad}): holders that live as long as a function, a registry, a
#: running thread or a queue; what an optimizer keeps besides the model's state; what a hook keeps.
_KIND_FIXES = {
    "optimizer_params": (
        "`{holder}` gains parameters every step that are not the model's, and the optimizer keeps each with "
        "its gradient and state (Adam's exp_avg/exp_avg_sq) for as long as it lives: build the layer or "
        "parameter once, before the loop, instead of calling `add_param_group` on every step; or remove "
        "the stale group (and its `optimizer.state` entries) when its parameters are replaced, or rebuild "
        "the optimizer over the current parameters only."
    ),
    "optimizer_state": (
        "`{holder}` keeps optimizers besides the tracked one, each with its state for the model's "
        "parameters (Adam's exp_avg/exp_avg_sq: twice the parameters' size): build the optimizer once, "
        "before the loop, and keep no old ones (nor their `state_dict()`s) in a list."
    ),
    "optimizer_orphans": (
        "`{holder}` keeps the state (Adam's exp_avg/exp_avg_sq) of parameters no param group lists any "
        "more, keyed by the old parameters themselves, so each replaced layer stays alive with its "
        "gradients: when replacing parameters, `del opt.state[p]` for each old one (or use "
        "`add_param_group` for new layers and rebuild the optimizer over the current parameters)."
    ),
    "outside": (
        "`{holder}` is kept alive from outside Python's view: no variable, attribute or container refers to "
        "it, but C++ code or the interpreter holds it (a callback handed to a C++ object, such as a DDP comm "
        "hook or an autograd hook, or one registered with atexit), and with it every model or tensor it "
        "captured. Each copy made (a fold, a trial) stays: unregister it when done, or let it hold a "
        "`weakref.ref` to what it needs instead of the object itself{grad}."
    ),
    "optimizer_graph": (
        "`{holder}` holds state tensors (Adam's exp_avg/exp_avg_sq) that carry autograd graphs: the optimizer's "
        "`step` runs with grad enabled on gradients that carry a graph (`backward(create_graph=True)`), so each "
        "in-place update chains onto the last and keeps every step's graph. Decorate `step` with "
        "`@torch.no_grad()` (torch's own optimizers are), or update the state from `p.grad.detach()`."
    ),
    "optimizer_attr": (
        "`{holder}` is a container the code keeps in the optimizer (not the optimizer's own state), and it "
        "gains a tensor every step: keep numbers (`.item()`), a bounded `collections.deque(maxlen=...)`, or "
        "clear it after logging{grad}."
    ),
    "closure": (
        "`{holder}` is captured by a closure (a hook or callback) and gains tensors every step: store "
        "`t.detach().cpu()` or a number, clear it after use, or remove the hook when done{grad}."
    ),
    "piled_hook": (
        "`{holder}` is kept by a hook that is registered again on every step and never removed, so "
        "the hooks pile up and each keeps what it captured: register the hook once, outside the loop, or "
        "keep the handle the registering call returns (`module.register_forward_hook(...)`, "
        "`tensor.register_hook(...)`) and call `handle.remove()` when done; store "
        "`t.detach().cpu()` or numbers{grad}."
    ),
    "hook": (
        "`{holder}` holds a hook object whose tensors grow every step: it is applied again and again "
        "without being removed (`torch.nn.utils.prune` re-applied each epoch adds one more pruning "
        "method, with its own copy of the mask, to the module's hook). Apply it once, make it permanent "
        "after each round (`prune.remove(module, name)`), or remove the old hook (`handle.remove()`) "
        "before registering a new one{grad}."
    ),
    "lru_cache": (
        "`{holder}` is cached with `functools.lru_cache`, which keeps every argument and result it saw "
        "for as long as the function lives (a tensor argument is a new key on every call): cache detached "
        "values (`.detach()`) keyed on plain values (a length, a shape), give it a small `maxsize`, or "
        "call `{holder}.cache_clear()`{grad}."
    ),
    "finalizer": (
        "`{holder}` is kept by a `weakref.finalize` callback, which the finalizer registry keeps until the "
        "watched object dies: a callback that is a bound method of the object mapping what it watches (or "
        "takes it as an argument) keeps that object alive, so neither ever goes. Make the callback hold no "
        "reference to it (a plain function of an id, a `weakref` to the owner), or call the finalizer "
        "(`finalizer()` / `.detach()`) when done{grad}."
    ),
    "thread": (
        "`{holder}`: threads started for each step are still running, and each keeps the arguments "
        "it was given until it returns, so they pile up while the work is slower than the loop: run "
        "the work in a fixed pool (`ThreadPoolExecutor(max_workers=2)`, dropping finished futures) or "
        "a bounded queue, join a step's thread before starting the next, or give it what it needs as "
        "a detached host copy{grad}."
    ),
    "mp_queue": (
        "`{holder}` is a multiprocessing.Queue that nothing empties: each put() stays in this process "
        "until the queue's feeder thread has sent it, and with no reader (or a slow one) the pipe fills "
        "and every later item stays here. Make sure a consumer runs and keeps up (`q.get()`), "
        "give the queue a bound (`Queue(maxsize=...)`: put() then waits), or put only what is read{grad}."
    ),
    "thread_queue": (
        "`{holder}` is a queue between threads (queue.Queue, SimpleQueue) whose items pile up: what the loop "
        "put() is not taken by get() as fast, "
        "because its consumer thread has stopped (an exception ends a thread silently; check "
        "`thread.is_alive()`) or is slower than the loop. Keep the consumer alive and fast enough, give the "
        "queue a bound (`Queue(maxsize=...)`: put() then waits), or put numbers (`.item()`) instead of "
        "tensors{grad}."
    ),
    "executor_queue": (
        "`{holder}` is a ThreadPoolExecutor's queue of tasks submitted and not yet run, each keeping its "
        "function and arguments: its workers run them slower than the loop submits them (or are blocked). "
        "Bound the work in flight (wait for the oldest futures, `concurrent.futures.wait(...)`, when more "
        "than a few are pending), submit a detached host copy or numbers (`.item()`) instead of the "
        "tensors, or add workers where the task waits on I/O{grad}."
    ),
    "default_arg": (
        "`{holder}` is a mutable default argument: one object shared by every call, so what is appended to "
        "it stays alive for the life of the function. Default to `None` and create the container inside the "
        "function, or pass it in explicitly and clear it{grad}."
    ),
}


def queue_fix(holder: str, hkind: str) -> str:
    """The fix for what a multiprocessing Queue or a queue.Queue keeps because nothing takes it out
    (tensors or plain data alike), else ''."""
    return _kind_fix(holder, hkind, "") if hkind in QUEUES else ""


#: Holder kinds of queues between threads or processes (probes/walk.py).
QUEUES = ("mp_queue", "thread_queue", "executor_queue")


def _kind_fix(holder: str, hkind: str, grad: str) -> str:
    """The fix its kind gives a holder (`_KIND_FIXES`), else ''."""
    fix = _KIND_FIXES.get(hkind)
    return fix.format(holder=holder, grad=grad) if fix else ""


def _chain_fix(holder: str, hkind: str, grad: str) -> str:
    """The fix for what each link of a growing chain of objects keeps (a linked list), else ''."""
    if hkind != "chain" or "." not in holder:
        return ""
    head, what = holder.rsplit(".", 1)
    return (
        f"`{head}` is a chain of objects, each linked to the one before it, that gains a link every step, "
        f"and every link keeps its `{what}` alive: drop the link to old nodes (set it to `None`), keep a "
        f"bounded history (`collections.deque(maxlen=...)`) instead of a chain, or store numbers or "
        f"detached copies{grad}."
    )


def jit_fix(holder: str, hkind: str) -> str:
    """The fix for what ``torch.jit.trace`` called again and again keeps (probes/jit_traces.py), else ''."""
    if hkind != "jit":
        return ""
    return (
        f"`{holder}` is called again and again (every step here): TorchScript keeps each traced function, its "
        f"graph and the tensors it captured as constants, in its global compilation unit for the rest of the "
        f"process, even once the traced result is deleted (pytorch/pytorch#35600). Trace once, before the loop, "
        f"and reuse the traced module or function (one per input shape at most); pass tensors as inputs instead "
        f"of capturing them; or run the module eagerly (or with `torch.compile`) where tracing is not needed."
    )
