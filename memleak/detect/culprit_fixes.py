"""Fix text for a culprit: what to change in the code, chosen by the kind of leak and by how
its holder (a variable, a module attribute, a closure, a ctx, ...) keeps the tensors."""

from __future__ import annotations

import re

from ..holder_names import attribute_owner, is_family, is_traceback_note, leaf_name, thread_local_parts
from ..schema import Kind
from ..units import fmt_bytes
from .kept_fixes import QUEUES, kept_fix, queue_fix

#: Said after a node count that is a lower bound (HolderRow.capped).
NODES_LOWER_BOUND = " (a lower bound: the walk counts a bounded number of graphs)"


def culprit_fix(
    kind: Kind,
    holder: str,
    hkind: str,
    chained: bool,
    has_grad: bool,
    saved_growing: bool,
    same_object: bool | None = None,
    arrays: str = "",
) -> str:
    """The fix for `holder` (of the walk's kind `hkind`) keeping tensors as a `kind` leak;
    `arrays`: what it keeps are numpy arrays that share their tensors' memory ("shared") or that
    have memory of their own ("own"), or images with pixel memory of their own ("images")."""
    if hkind == "optimizer_graph":  # the chain is the optimizer's own update: its step needs no_grad
        return kept_fix(holder, hkind, "")
    if kind == Kind.RETAINED_GRAPH:
        return _retained_graph_fix(holder, chained, same_object, hkind)
    if hkind in QUEUES:  # nothing reads the queue: what the items are is beside the point
        return queue_fix(holder, hkind)
    if arrays:
        return _arrays_fix(holder, arrays)
    if ".ctx." in holder:
        return (
            f"the custom autograd Function stores tensors as attributes of `ctx` ({holder}), which makes a "
            f"reference cycle through the graph that is never freed: save them with "
            f"`ctx.save_for_backward(...)` and read `ctx.saved_tensors` in backward."
        )
    grad = (
        " and `.detach()` them (they carry autograd graphs; outputs of an evaluation or inference are best made "
        "under `torch.no_grad()`)"
        if has_grad
        else ""
    )
    if is_family(holder):  # holders made one per step, folded into one (probes/holder_families.py)
        return (
            f"a new `{holder}` is made every step or batch (its name takes a number each time: "
            f'`setattr(obj, f"name_{{i}}", ...)`, `d[f"key{{i}}"] = ...`) and none is ever dropped: reuse one '
            f"name (overwrite it), delete the old ones (`delattr`, `del`), or keep them in a bounded container "
            f"(`collections.deque(maxlen=...)`){grad}."
        )
    if hkind == "metric_state":
        return _metric_fix(holder, grad)
    if hkind == "callback":
        return _callback_fix(holder)
    if kind == Kind.CACHED_TENSOR:
        return (
            f"the module attribute `{holder}` gains tensors every forward: do not cache on `self` across "
            f"steps (reset it at the start of each forward/step), or bound it "
            f"(`collections.deque(maxlen=...)`){grad}. A tensor that must persist belongs in "
            f"`register_buffer` with a fixed size."
        )
    return _container_fix(holder, hkind, grad)


def _arrays_fix(holder: str, arrays: str) -> str:
    """The fix for a holder whose items are arrays or images (`culprit_fix`'s `arrays`)."""
    if arrays == "own":
        return (
            f"`{holder}` keeps numpy arrays that grow in number or size every step, all in host memory "
            f"(`np.append`, `np.concatenate` onto what was kept copy it into a larger array): keep only what "
            f"you need (a number, a running metric), write them to disk as they come, bound it with "
            f"`collections.deque(maxlen=...)`, or clear it at the end of each epoch."
        )
    if arrays == "images":
        return (
            f"`{holder}` keeps images (PIL) that grow in number every step; each keeps its pixels in host "
            f"memory of its own (width x height x 4 bytes for RGB): save them to disk as they come (or keep a "
            f"path, a thumbnail), bound it with `collections.deque(maxlen=...)`, or clear it regularly."
        )
    if arrays == "shared":
        return (
            f"`{holder}` gains numpy arrays every step that share the memory of the tensors they came from "
            f"(on a CPU tensor `.cpu()` is the tensor itself and `.numpy()` copies nothing), so each keeps a "
            f"whole tensor alive: keep a copy that owns its memory (`t.detach().cpu().numpy().copy()`, or "
            f"only what you need, like `.mean().item()`), bound it with `collections.deque(maxlen=...)`, or "
            f"clear it regularly."
        )
    return ""


def bounded_fix(holder: str, capacity: int, item_bytes: float) -> str:
    """The fix for a bounded container that grows towards a bound too large to wait for (it is
    spared where the bound is near or small: culprits._spare_bounded)."""
    return (
        f"`{holder}` is bounded at {capacity} items, but they would hold about {fmt_bytes(item_bytes * capacity)}: "
        "lower its bound, or keep numbers (`.item()`) or detached CPU copies (`t.detach().cpu()`) in it."
    )


def bare_graphs_fix(holder: str) -> str:
    """The fix for grad_fns or autograd ctx objects kept without their tensors."""
    return (
        f"`{holder}` keeps autograd graph objects (a `grad_fn`, a custom Function's `ctx`) without their "
        f"tensors, and each keeps its graph and what it saved for backward: keep what you need from them "
        f"(a number, a shape) instead of the object, or clear it regularly."
    )


def traceback_fix(holder: str, note: str) -> str:
    """The fix for tensors that caught exceptions keep through their tracebacks (the walk's note
    on the holder: probes/reach.exception_frames), else ''."""
    if not is_traceback_note(note):
        return ""
    return (
        f"`{holder}` keeps caught exceptions, and each one's traceback keeps the frames it passed through "
        f"with every local they had (tensors, their autograd graphs): keep `str(e)` or `repr(e)` instead "
        f"of the exception, or let go of its frames first (`traceback.clear_frames(e.__traceback__)`, or "
        f"`e.with_traceback(None)`)."
    )


def _callback_fix(holder: str) -> str:
    return (
        f"`{holder}` keeps callbacks (lambdas, closures, partials) that capture tensors, in their closures "
        f"or default arguments (`lambda loss=loss: ...`), and gains one every step: capture numbers "
        f"(`loss.item()`) or detached copies instead, drop each callback once it has run (clear the list), "
        f"or register one callback that reads the latest values."
    )


def _metric_fix(holder: str, grad: str) -> str:
    metric = attribute_owner(holder) or holder
    return (
        f"`{holder}` is a state of the metric `{metric}` (it has update, compute and reset), which keeps "
        f"every update until it is reset: call `{metric}.reset()` after `{metric}.compute()` at the end of "
        f"each epoch (in Lightning, log the metric object itself, `self.log(name, metric)`, which resets it), "
        f"or use a constant-memory form (torchmetrics: `thresholds=` for the curve metrics){grad}."
    )


def _code_name(holder: str) -> str:
    """The holder as code can name it in a fix's example: a module path (`1.running_mean`, a
    Sequential's child) or a path through an index is no Python expression, `self.running_mean` is."""
    name = holder.split(" (", 1)[0]
    if re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*|\['[^']*'\])*", name):  # `total`, `stats['loss']`
        return name
    return f"self.{leaf_name(name)}" if "." in name else leaf_name(name)


def fed_chain_fix(holder: str, feeders: list[str]) -> str:
    """The fix of a graph that grows only with the tensors other holders keep: fix those."""
    first = feeders[0]
    return (
        f"`{holder}` is computed every step from the tensors `{first}` keeps, so its graph grows with them: keep "
        f"numbers (`loss.item()`) or detached tensors (`loss.detach()`) in `{first}` and `{holder}` stops growing "
        f"too (compute it from them, under `torch.no_grad()` if it needs no gradient)."
    )


def _retained_graph_fix(holder: str, chained: bool, same_object: bool | None, hkind: str = "") -> str:
    """Chained graphs (each step's built on the last) are cut with `.detach()`; graphs merely
    kept alongside their tensors are not built at all (no_grad) or dropped (`.detach()`). An
    attribute of the model's module is named as its own code names it (`self.running_mean`)."""
    code = f"self.{leaf_name(holder)}" if hkind == "module_attr" else _code_name(holder)
    if chained and same_object:
        return (
            f"`{holder}` is updated in place with every step's result (like `{code} += loss`), which chains "
            f"each step's autograd graph to the previous one, so none is ever freed: accumulate a Python "
            f"number (`{code} += loss.item()`) or a detached tensor (`{code} += loss.detach()`)."
        )
    if chained and same_object is False:
        return (
            f"`{holder}` is recomputed every step from its previous value without `.detach()`, which chains "
            f"each step's autograd graph to the previous one, so none is ever freed: carry a detached value "
            f"into the next step (`{code} = {code}.detach()`, for an RNN hidden state `h = h.detach()` "
            f"after each backward; a running statistic under `torch.no_grad()`), and call `backward()` "
            f"without `retain_graph=True`."
        )
    if chained:
        return (
            f"`{holder}` links each step's autograd graph to the previous one, so no graph is ever freed. "
            f"Accumulate a Python number instead (`{code} += loss.item()`), or cut the link with "
            f"`.detach()` where the tensor is carried into the next step (an RNN hidden state: "
            f"`h = h.detach()` each step); then `backward()` needs no `retain_graph=True`."
        )
    if hkind == "metric_state":
        metric = attribute_owner(holder) or holder
        return (
            f"`{holder}` is a state of the metric `{metric}`, and it keeps what each update was given "
            f"together with its autograd graph (the view a metric stores still keeps the graph of the "
            f"tensor it was made from): pass detached tensors (`{metric}.update(preds.detach(), target)`), "
            f"and call `{metric}.reset()` after `{metric}.compute()` at the end of each epoch."
        )
    return (
        f"`{holder}` keeps tensors together with their autograd graphs (every activation saved for "
        f"backward). Run evaluation/inference under `torch.no_grad()` or `torch.inference_mode()`, "
        f"store `out.detach()` (`.cpu()`, or `.item()` for a scalar), and call `backward()` without "
        f"`retain_graph=True` unless a second backward really needs it."
    )


def grown_tensor_fix(holder: str, has_grad: bool) -> str:
    """A holder of one tensor replaced every step by a larger one (`torch.cat` onto itself): it is
    not a list to bound or to fill with numbers."""
    leaf = _code_name(holder)
    grad = " Detach what you add (`x.detach()`): each concatenation otherwise keeps its graph." if has_grad else ""
    return (
        f"`{holder}` is one tensor replaced every step by a larger one (`{leaf} = torch.cat([{leaf}, x])`), so "
        f"it holds everything ever added to it. Preallocate it at a fixed size and write each step's rows in "
        f"place at a moving index (a fixed-length queue), or keep only the last N rows "
        f"(`{leaf} = torch.cat([{leaf}, x])[-N:].clone()`).{grad}"
    )


def _container_fix(holder: str, hkind: str, grad: str) -> str:
    """A holder that keeps gaining tensors (every step or every few): what to keep instead, or how
    to bound or clear it, said the way its kind of holder (closure, optimizer, default argument, ...) is changed."""
    if hkind == "closure" and " (closure of " in holder:
        var, owner = holder[:-1].split(" (closure of ", 1)
        return (
            f"`{var}`, a variable of the enclosing function that the closure of `{owner}` keeps alive, gains "
            f"tensors every step: append a number (`loss.item()`) or a detached copy (`t.detach().cpu()`), "
            f"bound it with `collections.deque(maxlen=...)`, or clear it regularly{grad}."
        )
    if (local := thread_local_parts(holder)) is not None:
        var, function = local
        which = (
            f"`{var}`, a local variable of {function}() running in another thread, keeps"
            if " or " not in var
            else f"One of {', '.join(f'`{v}`' for v in var.split(' or '))}, local variables of {function}() running "
            f"in another thread, keeps"
        )
        return (
            f"{which} gaining tensors (named from that function's code: memleak does not read another thread's running "
            f"frames, which can crash Python 3.11). Keep a running aggregate there (`total += t.sum().item()`) or a "
            f"bounded window (`collections.deque(maxlen=...)`), or hand it numbers (`.item()`, `.cpu()`) instead of "
            f"tensors{grad}."
        )
    if kept := kept_fix(holder, hkind, grad):
        return kept
    if "(...)" in holder:  # an iterator no variable names: a `for` loop's own (probes/referrers.py)
        return (
            f"`{holder}`, the iterator of a `for` loop, keeps what it has yielded: `itertools.cycle` saves every "
            f"item to replay it (a DataLoader makes new tensors for every batch) and `itertools.tee` keeps what "
            f"one copy has not read. Iterate the loader anew at each pass (`while True: for batch in loader: "
            f"...`), or call `iter(loader)` again on `StopIteration`{grad}."
        )
    if hkind == "unreachable":
        return (
            "tensors created here stay alive although no variable, attribute or container memleak could "
            "reach holds them: typically a reference cycle through autograd (a custom autograd Function "
            "storing tensors on `ctx` or `self` instead of `ctx.save_for_backward`, a tensor hook or "
            "closure capturing its own tensor), or a registry kept in C that Python code cannot list "
            "(`atexit.register(fn, t)` or `signal.signal` called every step, a C extension's callbacks), or "
            "a local variable of a function another thread runs (a consumer of a queue the loop feeds: "
            "memleak does not read other threads' running frames). Break the cycle, `.detach()` what is "
            "stored, register such a callback once, with no tensor, or keep numbers in that thread."
        )
    # a metric's state (an object with update, compute and reset) has its own kind and fix (_metric_fix)
    return (
        f"`{holder}` keeps gaining tensors: append a number (`loss.item()`) or a detached copy "
        f"(`t.detach().cpu()`), bound it with `collections.deque(maxlen=...)`, or clear it regularly{grad}."
    )
