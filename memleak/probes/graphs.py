"""Autograd graphs held by a holder, and whether they are built on what it held before.

A graph that grows every step without adding tensor bytes (``running += loss``, a moving
average kept without ``.detach()``, an RNN hidden state carried between batches) shows as a
holder whose graph gains nodes from one sampled step to the next. Which holder *carries* the
chain is told by the graph itself, not by which tensors a later step happens to read
(``total += loss.item()`` reads ``loss`` but builds nothing on it): a holder is *linked* when the
graph of what it holds now reaches, as an input, the exact output (node and output number) of
what it held at the previous sampled step. A loss recomputed each step from a carried hidden
state reaches the hidden state's old node, never its own old node; the hidden state reaches its
own.

Only node ids, sequence numbers and output numbers are kept between samples (no reference);
a node whose id was reused has another sequence number.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# AccumulateGrad nodes carry UINT64_MAX as their sequence number.
NO_SEQ = 1 << 63

#: (id(node), output number) -> the node's sequence number.
Roots = dict[tuple[int, int], int]


@dataclass
class GraphInfo:
    """What one bounded walk of a holder's graph found."""

    nodes: int = 0
    capped: bool = False
    lo: int | None = None  # lowest and highest sequence numbers met (node creation order)
    hi: int | None = None
    linked: bool = False  # reaches an output the same holder held at the previous sample


def _seq(node) -> int:
    try:
        return node._sequence_nr()
    except (AttributeError, RuntimeError):
        return NO_SEQ


def roots_of(edges: Iterable[tuple[object, int]]) -> Roots:
    """The (node, output number) pairs of a holder's tensors, keyed for the next sample."""
    return {(id(n), nr): _seq(n) for n, nr in edges if n is not None}


def graph_info(grad_fns: list, cap: int, prev: Roots | None = None, now: Roots | None = None) -> GraphInfo:
    """Nodes reachable from `grad_fns` (at most `cap`), their sequence range, and whether an
    input edge of one of them is an output recorded in `prev` (what the holder held before) that
    the holder no longer holds (`now`): a container keeping ``logits`` and a loss computed from
    them is not built on its past, a value computed from the one it replaced is."""
    info = GraphInfo()
    if prev and now:
        prev = {k: v for k, v in prev.items() if k not in now}
    seen: set[int] = set()
    stack = list(grad_fns)
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        seq = _seq(node)
        if seq < NO_SEQ:
            info.lo = seq if info.lo is None or seq < info.lo else info.lo
            info.hi = seq if info.hi is None or seq > info.hi else info.hi
        if len(seen) >= cap:
            info.capped = True
            break
        try:
            nxt = node.next_functions
        except (AttributeError, RuntimeError):
            continue
        for n, nr in nxt:
            if n is None:
                continue
            if prev and not info.linked:
                want = prev.get((id(n), nr))
                info.linked = want is not None and want == _seq(n)
            if id(n) not in seen:
                stack.append(n)
    info.nodes = len(seen)
    return info


def graph_stats(grad_fns: list, cap: int) -> tuple[int, bool, int | None, int | None]:
    """Autograd nodes reachable from these grad_fns (at most `cap`), and the lowest and highest
    sequence numbers among them: nodes are numbered as they are created, so a graph whose lowest
    number is older than the last sample's highest still holds nodes from an earlier step."""
    info = graph_info(grad_fns, cap)
    return info.nodes, info.capped, info.lo, info.hi


def count_graph(grad_fns: list, cap: int) -> tuple[int, bool]:
    """Autograd nodes reachable from these grad_fns, at most `cap`."""
    n, capped, _, _ = graph_stats(grad_fns, cap)
    return n, capped
