"""The memory a model and its optimizer own, by category (parameters, buffers, gradients,
optimizer state), beside the run's memory counter: the modules probe's ``categories``."""

from __future__ import annotations

from collections.abc import Callable

from .identity import local_nbytes, local_tensor, params_and_buffers, state_tensors


def memory_categories(model, opt, counter: Callable[[], int] | None) -> dict[str, int]:
    """Bytes by category as torch's ``mem_tracker`` names them: parameter, buffer, gradient,
    optimizer_state; with `counter` (the run's memory counter) its total, and the rest as other."""
    cats = {"parameter": 0, "buffer": 0, "gradient": 0, "optimizer_state": 0}
    seen: set[int] = set()

    def size(t) -> int:
        t = local_tensor(t)  # FSDP2: this rank's shard, not the global size
        try:
            ptr = t.data_ptr()
        except (RuntimeError, NotImplementedError, TypeError):
            return 0
        if ptr in seen:  # tied weights count once
            return 0
        seen.add(ptr)
        return t.numel() * t.element_size()

    params, buffers = params_and_buffers(model)
    for p in params:
        cats["parameter"] += size(p)
        if p.grad is not None:
            cats["gradient"] += size(p.grad)
    for b in buffers:
        cats["buffer"] += size(b)
    state = getattr(opt, "state", None)
    for p in state or ():
        cats["optimizer_state"] += sum(size(v) for v in state_tensors(state, p))
    cats.update(optimizer_params(opt, state))
    if counter is not None:
        total = int(counter())
        cats["total"] = total
        cats["other"] = max(0, total - sum(cats[k] for k in ("parameter", "buffer", "gradient", "optimizer_state")))
    return cats


def optimizer_params(opt, state) -> dict[str, int]:
    """The bytes of the parameters the optimizer steps (``optimizer_params``) and of those it has
    made state for (``stateful_params``): Adam makes a parameter's state at its first update, so
    state that grows with the second while the first stays is created lazily, bounded by the first
    (detect/lazy_state.py). Empty without an optimizer."""
    groups = getattr(opt, "param_groups", None)
    if not groups:
        return {}
    total = stateful = 0
    for group in groups:
        for p in group.get("params", ()):
            try:
                n = local_nbytes(p)
            except (RuntimeError, TypeError, AttributeError):
                continue
            total += n
            stateful += n if state and state.get(p) else 0
    return {"optimizer_params": total, "stateful_params": stateful}
