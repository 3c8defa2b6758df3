"""What TorchScript's global compilation unit keeps: every function ``torch.jit.trace`` made.

``torch.jit.trace`` compiles what it traces (a function, or each module's ``forward``) into
``torch.jit._state._python_cu``, and nothing ever takes it out: the traced function or module
can be deleted, its graph stays for the rest of the process (pytorch/pytorch#35600, #58109,
#86537). A loop that traces again on every step (to export, to re-trace on a new input shape)
grows host memory by the graph each time, about 3 KiB per graph node (measured on the 2-core
CPU machine: 3.2 to 3.7 KiB over 300 traces of an MLP and of a conv stack), and a traced
function keeps the tensors it captured as constants (a tensor of the loop that is no input).

`add_traced` counts them under one holder named by the newest traced function
(``torch.jit.trace(f)``, ``torch.jit.trace(M.forward)``), kind ``jit``: the functions as its
objects, their graphs' estimated bytes as its object bytes, and their constant tensors as the
tensors it holds. A loop that traces once keeps a fixed set (no growth). Functions are sampled
per name (a long run of traces of one name, at its ends), so traces of something else kept from
earlier add a flat amount, not one scaled by the new traces' number.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from .walk_scope import SEQ_SAMPLE

#: Host bytes a traced graph keeps per node (its nodes, values, types and schema): measured above.
NODE_BYTES = 3 * 1024
HOLDER_KIND = "jit"
_MANGLE = re.compile(r"___torch_mangle_\d+\.")


def traced_functions() -> list:
    """The functions in TorchScript's global compilation unit, oldest first ([] when none)."""
    state = getattr(getattr(torch, "jit", None), "_state", None)
    cu = getattr(state, "_python_cu", None)
    try:
        return list(cu.get_functions()) if cu is not None else []
    except (RuntimeError, AttributeError, TypeError):
        return []


def base_name(qualified: str) -> str:
    """``__torch__.___torch_mangle_5.M.forward`` -> ``M.forward``; ``__torch__.f`` -> ``f``."""
    parts = _MANGLE.sub("", qualified).removeprefix("__torch__.").split(".")
    return ".".join(parts[-2:])


def graph_of(fn: Any) -> tuple[int, list[torch.Tensor]]:
    """The nodes of `fn`'s graph and the tensors it keeps as constants."""
    nodes = 0
    consts: list[torch.Tensor] = []
    for n in fn.graph.nodes():
        nodes += 1
        if n.kind() == "prim::Constant" and n.hasAttribute("value") and n.kindOf("value") == "t":
            consts.append(n.t("value"))
    return nodes, consts


def add_traced(w: Any, since: int = 0) -> None:
    """Tally the traced functions the compilation unit gained after its first `since` under one
    holder of the walk `w` (those from before tracking began are no part of the loop's growth, and
    a process that traced much before would hide the loop's traces in their number). The
    functions of one name (every trace of ``M.forward``) are alike: the ends of a long run of them
    are read and scaled (`SEQ_SAMPLE` at each end), as for any long container."""
    fns = traced_functions()[since:]
    if not fns:
        return
    groups: dict[str, list] = {}
    for fn in fns:
        groups.setdefault(base_name(fn.qualified_name), []).append(fn)
    holder = f"torch.jit.trace({base_name(fns[-1].qualified_name)})"
    st = w._stats(holder, HOLDER_KIND)
    st.note = st.note or (
        f"functions torch.jit.trace compiled into TorchScript's global compilation unit, which keeps "
        f"each for the rest of the process ({len(fns)} since tracking began, graphs ~{NODE_BYTES // 1024} KiB a node)"
    )
    for group in groups.values():
        n = len(group)
        sampled = group if n <= 2 * SEQ_SAMPLE else group[:SEQ_SAMPLE] + group[-SEQ_SAMPLE:]
        if len(sampled) < n:
            w._estimated(holder)
        st.objects += n
        st.obj_bytes += _tally(w, sampled, holder, n / len(sampled)) * NODE_BYTES


def _tally(w: Any, fns: list, holder: str, weight: float) -> float:
    """Push the constants of `fns` under `holder`, each standing for `weight` of them; their nodes, scaled."""
    nodes = 0
    for fn in fns:
        try:
            k, consts = graph_of(fn)
        except (RuntimeError, AttributeError, TypeError):
            continue
        nodes += k
        for t in consts:
            w.push(t, holder, holder, HOLDER_KIND, weight)
    return nodes * weight
