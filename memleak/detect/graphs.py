"""Graph-only growth: a holder that carries its autograd graph from step to step.

Pure over the ``holders`` records of the TensorProbe (docs/detectors-culprits.md). On each
deep step the probe walks every holder's graph (bounded) and marks the row ``linked`` when that
graph reaches, as an input, the exact output its tensors had at the previous deep step
(``probes/graphs.py``): what the holder holds now was computed from what it held then. A holder
linked on most samples whose graph keeps gaining nodes keeps every step's graph alive, however
few tensor bytes it adds (``running += loss``, a moving average of a loss, an RNN hidden state
carried without ``.detach()``). A value only read after the step (``total += loss.item()``), or a
loss recomputed each step from a carried state, is never linked: the carrier is named, not what
hangs off it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..records import HolderRow, HoldersRecord
from ..run import Run
from ..schema import Finding, Kind
from ..units import fmt_bytes
from .culprit_fixes import NODES_LOWER_BOUND

NAME = "graphs"

#: Samples a holder must be linked on before it is called a carrier.
MIN_LINKED = 2
#: Share of the samples after its first appearance on which it must be linked.
MIN_LINKED_SHARE = 0.5
#: Graph nodes it must gain between its first and last linked samples.
MIN_NODE_RISE = 8


def linked_counts(holders: Sequence[HoldersRecord]) -> dict[str, int]:
    """Per holder, on how many samples its graph was built on what it held at the sample before."""
    out: dict[str, int] = defaultdict(int)
    for r in holders:
        for row in r.holders:
            if row.linked:
                out[row.holder] += 1
    return dict(out)


def _series(holders: Sequence[HoldersRecord], name: str) -> list[tuple[int, HolderRow]]:
    return [(r.step, row) for r in holders for row in r.holders if row.holder == name]


def _carrier(series: list[tuple[int, HolderRow]]) -> dict | None:
    """Steps and node counts of a holder that carries a growing graph, or None."""
    linked = [(s, row) for s, row in series if row.linked]
    later = len(series) - 1  # the first sample has nothing to be linked to
    if len(linked) < MIN_LINKED or later <= 0 or len(linked) / later < MIN_LINKED_SHARE:
        return None
    first_step, first = series[0]
    last_step, last = linked[-1]
    rise = float(last.nodes) - float(first.nodes)
    if last_step <= first_step or (rise < MIN_NODE_RISE and not last.capped):
        return None
    counts = [float(row.count) for _, row in series]
    if counts[-1] > 1.5 * counts[0] + 1 or (counts[-1] >= counts[0] + 2 and counts == sorted(counts)):
        # a growing container, not a carrier (one of a chain's links kept each step, `hist.append(ema)`,
        # reads linked too): the culprits detector names it, and the chain's own carrier is named here
        return None
    nodes = [float(row.nodes) for _, row in series]
    if any(
        b < 0.9 * a for a, b in zip(nodes, nodes[1:], strict=False)
    ):  # a carried chain never loses nodes: it was cut
        return None
    return {
        "first_step": first_step,
        "last_step": last_step,
        "n_linked": len(linked),
        "samples": later,
        "nodes0": int(first.nodes),
        "nodes1": int(last.nodes),
        "per_step": max(rise, 0.0) / (last_step - first_step),
        "capped": bool(last.capped),
        "in_place": float(last.old) > 0,
        "bytes": float(last.bytes),
        "bytes0": float(first.bytes),
    }


def _fix(holder: str, in_place: bool) -> str:
    if in_place:
        return (
            f"`{holder}` is updated in place with each step's result (like `{holder} += loss`), which links "
            f"every step's autograd graph to the previous one, so none is ever freed: accumulate a number "
            f"(`{holder} += loss.item()`) or a detached tensor (`{holder} += loss.detach()`)."
        )
    return (
        f"`{holder}` is computed each step from its own previous value without `.detach()`, which links every "
        f"step's autograd graph to the previous one, so none is ever freed: carry a detached value into the "
        f"next step (`{holder} = {holder}.detach()` after backward; for an RNN state "
        f"`hidden = tuple(h.detach() for h in hidden)`; a running statistic under `torch.no_grad()` or "
        f"from `.item()`), and call `backward()` without `retain_graph=True`."
    )


def _finding(holder: str, c: dict, kind_of_holder: str) -> Finding:
    capped = NODES_LOWER_BOUND if c["capped"] else ""
    evidence = (
        f"the autograd graph {holder} holds is built on the tensor it held at the previous sampled step: its "
        f"graph reaches that tensor's node as an input on {c['n_linked']} of {c['samples']} sampled steps, so "
        f"{holder} carries every step's graph into the next",
        f"that graph grows from {c['nodes0']} nodes at step {c['first_step']} to {c['nodes1']}{capped} at step "
        f"{c['last_step']}: +{c['per_step']:.1f} autograd nodes per step, with the tensors they saved for "
        f"backward, while {holder} itself stays at {fmt_bytes(c['bytes'])}",
    )
    span = max(1, c["last_step"] - c["first_step"])
    conf = 0.85 + 0.1 * min(1.0, c["n_linked"] / 4)
    return Finding(
        detector=NAME,
        kind=Kind.RETAINED_GRAPH,
        location=holder,
        bytes_per_step=max(0.0, (c["bytes"] - c["bytes0"]) / span),
        total_bytes=c["bytes"],
        confidence=round(conf, 3),
        evidence=evidence,
        fix=_fix(holder, c["in_place"]),
        leak=True,
        data={"holder_kind": kind_of_holder, "nodes_per_step": c["per_step"], "linked": c["n_linked"]},
    )


def detect(run: Run) -> list[Finding]:
    """A `retained_graph` finding at each holder that carries a growing graph from step to step."""
    holders = run.holders
    out = []
    for name in linked_counts(holders):
        series = _series(holders, name)
        c = _carrier(series)
        if c is not None:
            out.append(_finding(name, c, series[-1][1].kind))
    return out
