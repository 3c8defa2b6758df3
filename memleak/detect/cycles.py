"""Reference cycles through autograd: what forms them, in words, and how to break them.

Pure (no torch): reads the ``cycle`` mark the TensorProbe puts on a cohort of surviving tensors
that no variable holds (``probes/reach.cycle_of``), or a holder named through a custom
Function's ``ctx``. Only a full run of Python's cyclic collector frees these cycles, and it
runs on object counts, never on device-memory pressure: between collections every step adds
one more, so memory piles up (on a GPU, until an OOM).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..records import BirthCohort
from ..schema import Kind


def cycle_mark(cohorts: Iterable[BirthCohort], holder: str) -> str:
    """The cycle a group of cohorts is kept by: ``grad``, ``ctx:Function``, ``saved:Function``,
    ``packed:unpack_hook``, or ""."""
    for c in cohorts:
        if c.cycle:
            return c.cycle
    if ".ctx." in holder:
        return "ctx:" + holder.split(".ctx.", 1)[0]
    return ""


def describe(mark: str, site: str, holder: str) -> tuple[Kind, str, str] | None:
    """(kind, evidence, fix) for a cycle mark; None when there is none."""
    if mark == "grad":
        return (
            Kind.RETAINED_GRAPH,
            (
                f"a reference cycle keeps them: each tensor created at {site} has a .grad made by "
                f"backward(create_graph=True), and that gradient's autograd graph saved the tensor itself "
                f"(tensor -> .grad -> .grad.grad_fn -> saved tensor -> tensor); only a full run of Python's "
                f"cyclic garbage collector frees it, so every step adds one more until it runs"
            ),
            (
                f"the tensors created at {site} keep themselves alive through their `.grad`: compute the "
                f"gradient with `torch.autograd.grad(loss, x, create_graph=True)` instead of "
                f"`loss.backward(create_graph=True)`, or set `x.grad = None` once it is used, which breaks "
                f"the cycle."
            ),
        )
    if mark.startswith("hook:"):
        fn = mark[5:]
        return (
            Kind.SURVIVING_TENSORS,
            (
                f"a reference cycle keeps them: the hook {fn}, registered on each tensor created at {site} "
                f"(tensor.register_hook), captures that tensor in its closure (tensor -> its hooks -> "
                f"closure -> tensor); only a full run of Python's cyclic garbage collector frees it, so "
                f"every step adds one more until it runs"
            ),
            (
                f"the hook `{fn}` captures the tensor it is registered on: do not refer to the tensor inside "
                f"its own hook (use the gradient argument, or capture a `weakref.ref` to it), or remove "
                f"the hook (`handle.remove()`) once it has run."
            ),
        )
    if mark.startswith("saved:"):
        return _saved_view(mark[6:])
    if mark.startswith("packed:"):
        return _packed_live(mark[7:])
    if mark.startswith("ctx:"):
        fn = mark[4:]
        where = f" ({holder})" if holder else ""
        return (
            Kind.SURVIVING_TENSORS,
            (
                f"a reference cycle keeps them: the custom autograd Function {fn} stores its output on ctx"
                f"{where}; the output's grad_fn is that ctx, and the ctx holds the output (output -> "
                f"grad_fn/ctx -> ctx attribute -> output); only a full run of Python's cyclic garbage "
                f"collector frees it, so every step adds one more until it runs"
            ),
            (
                f"the custom autograd Function `{fn}` stores tensors as attributes of `ctx`{where}, which "
                f"makes a reference cycle through the graph that only the garbage collector frees: save them with "
                f"`ctx.save_for_backward(...)` and read `ctx.saved_tensors` in backward."
            ),
        )
    return None


def _saved_view(fn: str) -> tuple[Kind, str, str]:
    """A custom Function that saves a view of its own output (pytorch#94990)."""
    return (
        Kind.RETAINED_GRAPH,
        (
            f"a reference cycle inside autograd keeps them: the custom autograd Function {fn} saves a view "
            f"of its own output for backward (output -> grad_fn -> saved view -> the view's base, the "
            f"output; pytorch#94990); a backward frees it, but a forward whose output is dropped without "
            f"one (an evaluation outside torch.no_grad()) leaves a cycle in C++ that neither reference "
            f"counting nor Python's garbage collector ever frees"
        ),
        (
            f"the custom autograd Function `{fn}` saves a view of its output: save the output itself "
            f"(`ctx.save_for_backward(out)`) and reshape it in backward, or save a view of a detached "
            f"alias (`out.detach().view(...)`); run forwards that need no backward under "
            f"`torch.no_grad()`."
        ),
    )


def keeps_graph(mark: str) -> bool:
    """Whether a cycle of this mark keeps its tensors' graph: a saved view or a packed live tensor."""
    return mark.startswith(("saved:", "packed:"))


def cycle_holder(mark: str) -> str:
    """The holder a graph-keeping cycle names (`keeps_graph`): what the user fixes; else ""."""
    if mark.startswith("saved:"):
        return f"{mark[6:]}.saved_tensors"
    if mark.startswith("packed:"):
        return f"{mark[7:]} (saved_tensors_hooks)"
    return ""


def _packed_live(hook: str) -> tuple[Kind, str, str]:
    """The user's saved-tensor hooks packing a saved output as itself, graph attached."""
    return (
        Kind.RETAINED_GRAPH,
        (
            f"a reference cycle inside autograd keeps them: the saved_tensors_hooks whose unpack hook is "
            f"{hook} pack a saved tensor as the tensor itself, or as a copy still attached to the graph "
            f"(no .detach()); an op that saves its own output (tanh, sigmoid, exp, softmax) then holds a "
            f"tensor that holds the op (output -> grad_fn -> packed tensor -> output); a backward frees "
            f"it, but a forward with no backward (an evaluation outside torch.no_grad()) or "
            f"backward(retain_graph=True) leaves a cycle in C++ that neither reference counting nor "
            f"Python's garbage collector ever frees"
        ),
        (
            f"the pack hook paired with `{hook}` returns the live tensor: return `x.detach()` (or a copy "
            f"of it, as `torch.autograd.graph.save_on_cpu` does) so that the graph keeps data, not "
            f"itself; run forwards that need no backward under `torch.no_grad()`."
        ),
    )
