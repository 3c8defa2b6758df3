"""Modules that gain registered submodules, parameters or buffers step after step (the
``registered`` rows of the ``modules`` records): a module created inside forward() or the training
loop and assigned to the model (`self.heads[f"head_{step}"] = nn.Linear(...)`,
`self.blocks.append(...)`, `add_module`, `register_parameter`, `register_buffer` under a new name)
is kept, with its gradients, for as long as the model lives. A module that gains hooks step after
step (`register_forward_hook` or `param.register_hook` inside the loop, the handle dropped) runs
them all on every step, and each keeps what its function refers to (`_hooks_entry`). A module
whose own parameters or gradients grow in bytes while it registers nothing new (a sparse gradient
never zeroed, a parameter replaced by a larger tensor each step) keeps them for as long as the
model lives (`_own_entry`).

Parameters are no survivors and no attribute the walk names, so without these rows only the
memory categories (parameters grow) or the heap's growth would say anything, and name nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ..holder_names import family_name
from ..records import ModulesRecord, RegisteredRow
from ..schema import Kind
from ..units import fmt_bytes
from .culprit_table import Entries, entry
from .sampled_trend import MIN_COUNT_RISE, MIN_SAMPLES, sustained_rise
from .trend import theil

#: The confidence of hooks piling up: a leak, under that of the holder their functions fill.
HOOKS_CONFIDENCE = 0.6
#: A module's own parameters and gradients grow when they gain this many bytes over the run.
MIN_OWN_RISE = 64 * 1024


def registered_findings(modules: Sequence[ModulesRecord], findings: Entries) -> None:
    """An entry for every module whose registered entries keep growing in number."""
    if len(modules) < MIN_SAMPLES:
        return
    steps = [r.step for r in modules]
    rows: dict[str, list[RegisteredRow | None]] = defaultdict(lambda: [None] * len(modules))
    for i, r in enumerate(modules):
        for row in r.registered:
            rows[row.path][i] = row
    for path, series in rows.items():
        if _last(series).grew == "tensors":
            _own_entry(findings, path, steps, series)
            continue
        first = next(r for r in series if r is not None).first
        counts = [float(r.entries if r is not None else first) for r in series]
        trend = sustained_rise(steps, counts, MIN_COUNT_RISE)
        if trend is None:
            continue
        if _last(series).grew == "hooks":
            _hooks_entry(findings, path, steps, series, counts, trend)
        else:
            _entry(findings, path, steps, series, counts, trend)


def _where(path: str) -> str:
    """How the evidence names the module at `path` (the model itself has none)."""
    return f"`{path}`" if path != "<root>" else "the model"


def _last(series: list[RegisteredRow | None]) -> RegisteredRow:
    return next(r for r in reversed(series) if r is not None)


def _entry(findings: Entries, path: str, steps: list[int], series, counts: list[float], trend: dict) -> None:
    seen = [(s, r) for s, r in zip(steps, series, strict=True) if r is not None]
    last = seen[-1][1]
    at = [s for s, _ in seen]
    size, grads, state = (
        _per_step(at, [float(getattr(r, field)) for _, r in seen], trend)
        for field in ("bytes", "grad_bytes", "state_bytes")
    )
    bps = max(0.0, size) + max(0.0, grads) + max(0.0, state)
    span = f"steps {steps[0]}-{steps[-1]}"
    buffers = last.grew == "buffers"
    grows = last.grew if last.grew in ("submodules", "parameters", "buffers") else "submodules or parameters"
    where = _where(path)
    evidence = [
        f"{where} gains registered {grows} as the run goes: {int(counts[0])} -> "
        f"{int(counts[-1])} entries over {span} ({trend['slope']:.2g} per step)"
        + (f", the newest {last.newest}" if last.newest else ""),
        f"its parameters and buffers grow {fmt_bytes(max(0.0, size))} per step (now {fmt_bytes(last.bytes)}), "
        f"their gradients {fmt_bytes(max(0.0, grads))} per step (now {fmt_bytes(last.grad_bytes)})"
        + (f", the optimizer's state for them {fmt_bytes(max(0.0, state))} per step" if last.state_bytes else ""),
        *_grads_note(size, grads),
        "registered buffers are no tensors a variable keeps: they stay in model.buffers() and state_dict(), "
        "move with model.to(), and are freed only with the model"
        if buffers
        else "registered parameters are no tensors a variable keeps: they stay in model.parameters() and "
        "state_dict(), get gradients, and are freed only with the model",
    ]
    newest = f" (newest: `{last.newest}`)" if last.newest else ""
    fix = (
        f"{where} gets a new buffer on every step{newest}: `register_buffer` under a new name keeps each one "
        "for as long as the model lives. Register one buffer in __init__ and update it in place "
        "(`self.buf.copy_(x)`), or keep what you need outside the model, in a bounded "
        "`collections.deque(maxlen=...)` of detached copies."
        if buffers
        else f"{where} gets a new submodule or parameter on every step{newest}: a module created inside forward() "
        "or the training loop and assigned to a module (`self.heads[key] = nn.Linear(...)`, "
        "`.append(...)`, `add_module`, `register_parameter`) is registered, kept and trained forever. "
        "Create modules once in __init__ and reuse them (index a fixed ModuleList/ModuleDict, or call "
        "torch.nn.functional with weights made once); an architecture that must grow should grow rarely "
        "and within a bound."
    )
    # the model itself has no path: its new entries' family (`snap*`) is what the user finds in their code
    location = path if path != "<root>" else family_name(last.newest) or last.newest or path
    f = entry(findings, location, kind=Kind.CACHED_TENSOR)
    f.update(
        kind=Kind.CACHED_TENSOR,
        leak=True,
        confidence=max(f["confidence"], trend["confidence"]),
        bps=max(f["bps"], bps),
        total=max(f["total"], float(last.bytes + last.grad_bytes + last.state_bytes)),
        fix=fix,
        data={**f["data"], "holder_kind": "registered", "steps": steps, "entries": counts},
    )
    f["evidence"].extend(evidence)


def _hooks_entry(findings: Entries, path: str, steps: list[int], series, counts: list[float], trend: dict) -> None:
    """A module that gains a hook on every step: each step runs every hook registered so far, and
    each keeps what it refers to for as long as the module lives."""
    seen = [(s, r) for s, r in zip(steps, series, strict=True) if r is not None]
    last = seen[-1][1]
    size = _per_step([s for s, _ in seen], [float(r.bytes) for _, r in seen], trend)
    where = _where(path)
    hook_dict, _, code = last.newest.partition(" ")
    evidence = [
        f"{where} gains hooks as the run goes: {int(counts[0])} -> {int(counts[-1])} over steps "
        f"{steps[0]}-{steps[-1]} ({trend['slope']:.2g} per step), most in {hook_dict}"
        + (f", the newest registered by the function at {code.strip('()')}" if code else ""),
        "a hook registered inside the loop whose handle is dropped is never removed: every step runs all "
        "the hooks registered so far (the step slows down) and each keeps what its function refers to",
    ]
    fix = (
        f"{where} gets a new hook on every step: register it once, before the loop, or keep the handle "
        "(`h = module.register_forward_hook(fn)`, `h = tensor.register_hook(fn)`) and call `h.remove()` "
        "when its step is done."
    )
    location = f"{path}.{hook_dict}" if path != "<root>" else hook_dict
    f = entry(findings, location, kind=Kind.PYTHON_OBJECTS)
    f.update(
        kind=Kind.PYTHON_OBJECTS,
        leak=True,
        # under the confidence of a holder of tensors the hooks fill (named first: it is what grows)
        confidence=max(f["confidence"], min(trend["confidence"], HOOKS_CONFIDENCE)),
        bps=max(f["bps"], size),
        total=max(f["total"], float(last.bytes)),
        fix=fix,
        data={**f["data"], "holder_kind": "hooks", "steps": steps, "entries": counts},
    )
    f["evidence"].extend(evidence)


def _own_entry(findings: Entries, path: str, steps: list[int], series) -> None:
    """A module whose own parameters or gradients keep growing in bytes, its registrations the same."""
    seen = [(s, r) for s, r in zip(steps, series, strict=True) if r is not None and r.grew == "tensors"]
    at = [s for s, _ in seen]
    held = [float(r.bytes + r.grad_bytes) for _, r in seen]
    trend = sustained_rise(at, held, MIN_OWN_RISE)
    if trend is None:
        return
    last = seen[-1][1]
    size, grads = (_per_step(at, [float(getattr(r, f)) for _, r in seen], trend) for f in ("bytes", "grad_bytes"))
    name = f"{path}.{last.newest}" if path != "<root>" else last.newest
    evidence = [
        f"{_where(path)} registers nothing new, but its own parameters and their gradients grow: "
        f"{fmt_bytes(held[0])} -> {fmt_bytes(held[-1])} over steps {at[0]}-{at[-1]}, most in `{name}`"
    ]
    if grads > size:
        location = f"{name}.grad"
        evidence.append(
            f"the gradient grows {fmt_bytes(grads)} per step (now {fmt_bytes(last.grad_bytes)}): a sparse gradient "
            "(`nn.Embedding(sparse=True)`) is accumulated by adding each step's rows to it, and keeps them until zeroed"
        )
        fix = (
            f"`{location}` is never zeroed: call `zero_grad()` on every optimizer that steps `{name}` (a sparse "
            "gradient with its own optimizer, `SparseAdam`, needs that optimizer's `zero_grad()`), or set "
            f"`{name}.grad = None` after its step."
        )
    else:
        location = name
        evidence.append(f"the parameters grow {fmt_bytes(size)} per step (now {fmt_bytes(last.bytes)})")
        fix = (
            f"`{name}` is replaced by a larger tensor step after step (`p.data = torch.cat([p.data, rows])`): "
            "grow it rarely and within a bound (a fixed-size table with hashed ids), or keep what grows outside "
            "the model."
        )
    f = entry(findings, location, kind=Kind.CACHED_TENSOR)
    f.update(
        kind=Kind.CACHED_TENSOR,
        leak=True,
        confidence=max(f["confidence"], trend["confidence"]),
        bps=max(f["bps"], max(0.0, size) + max(0.0, grads)),
        total=max(f["total"], held[-1]),
        fix=fix,
        data={**f["data"], "holder_kind": "registered", "steps": at},
    )
    f["evidence"].extend(evidence)


def _grads_note(size: float, grads: float) -> list[str]:
    """Why gradients grow faster than their parameters, where they do."""
    if not grads > 1.5 * max(size, 0.0) > 0:
        return []
    return [
        "their gradients grow faster than the parameters: a gradient autograd handed over as a view keeps its "
        "whole base (as the rows of `torch.stack` over a growing list of parameters do)"
    ]


def _per_step(steps: list[int], values: list[float], trend: dict) -> float:
    """Bytes per step: the trend of the rows seen, else their size shared over the entries' span."""
    if len(values) >= 2 and steps[-1] > steps[0]:
        return float(theil(np.asarray(steps, dtype=float), np.asarray(values, dtype=float))[0])
    return values[-1] / max(1, trend["span"])
