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

A node is told by what it is, never by its Python wrapper: torch may make a fresh wrapper for a
C++ node each time one is asked for (``next_functions``, ``grad_fn``) and free it as soon as it is
dropped (torch 2.11 and 2.12 do; 2.13 keeps one per node), so ``id(wrapper)`` is reused in one walk
and means nothing at the next sample. Between samples a node is its class name, sequence number
(numbered as nodes are created, per thread) and output number (no reference kept): only a node
of the same class, number and output made in another thread could pass for it. Within one walk
the wrappers met are kept until the walk ends, so their ids stay unique while ``seen`` uses them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

# AccumulateGrad nodes carry UINT64_MAX as their sequence number.
NO_SEQ = 1 << 63

#: (node class name, sequence number, output number) of the outputs a holder's tensors hold.
Roots = set[tuple[str, int, int]]


@dataclass
class GraphInfo:
    """What one bounded walk of a holder's graph found."""

    nodes: int = 0
    capped: bool = False
    lo: int | None = None  # lowest and highest sequence numbers met (node creation order)
    hi: int | None = None
    linked: bool = False  # reaches an output the same holder held at the previous sample
    # the leaf tensors the graph's AccumulateGrad nodes hold (an input made to require grad each
    # step: the graph is all that keeps it), kept until the walk that asked for them ends
    leaves: list = field(default_factory=list)


def _seq(node) -> int:
    try:
        return node._sequence_nr()
    except (AttributeError, RuntimeError):
        return NO_SEQ


def node_key(node, nr: int) -> tuple[str, int, int] | None:
    """Who an output of a node is, whichever wrapper torch hands out for it; None for a node
    with no sequence number (AccumulateGrad): it cannot be told apart from its kind."""
    seq = _seq(node)
    return None if seq >= NO_SEQ else (type(node).__name__, seq, nr)


def roots_of(edges: Iterable[tuple[object, int]]) -> Roots:
    """The (node, output number) pairs of a holder's tensors, keyed for the next sample."""
    keys = (node_key(n, nr) for n, nr in edges if n is not None)
    return {k for k in keys if k is not None}


def graph_info(grad_fns: list, cap: int, prev: Roots | None = None, now: Roots | None = None) -> GraphInfo:
    """Nodes reachable from `grad_fns` (at most `cap`), their sequence range, and whether an
    input edge of one of them is an output recorded in `prev` (what the holder held before) that
    the holder no longer holds (`now`): a container keeping ``logits`` and a loss computed from
    them is not built on its past, a value computed from the one it replaced is."""
    info = GraphInfo()
    if prev and now:
        prev = prev - now
    # only a node whose sequence number is in prev can be one of its outputs (a set test per node,
    # where building each edge's key costs a call and a tuple)
    prev_seqs = {seq for _, seq, _ in prev} if prev else set()
    # id -> (the wrapper, its sequence number), kept until the walk ends: a wrapper freed when
    # popped would hand its id to the next one made, and that node would pass for one already seen
    seen: dict[int, tuple[object, int]] = {}
    # edges as next_functions gives them, (node, output number): pushed whole, not one by one
    stack: list[tuple[object, int | None]] = [(fn, None) for fn in grad_fns]
    pop, push, get = stack.pop, stack.extend, seen.get
    lo, hi = NO_SEQ, -1
    while stack:
        node, nr = pop()
        if node is None:
            continue
        known = get(id(node))
        if known is None:
            try:  # _seq inlined: this loop runs once per node of every graph a walk meets
                seq = node._sequence_nr()  # type: ignore[attr-defined]
            except (AttributeError, RuntimeError):
                seq = NO_SEQ
        else:
            seq = known[1]
        if nr is not None and seq in prev_seqs and (type(node).__name__, seq, nr) in prev:  # type: ignore[operator]
            info.linked = True
            prev_seqs = set()  # found: no edge needs testing any more
        if known is not None:
            continue
        seen[id(node)] = (node, seq)
        if seq < NO_SEQ:
            if seq < lo:
                lo = seq
            if seq > hi:
                hi = seq
        else:  # an AccumulateGrad node: the leaf it accumulates into lives as long as the graph
            leaf = getattr(node, "variable", None)
            if leaf is not None:
                info.leaves.append(leaf)
        if len(seen) >= cap:
            info.capped = True
            break
        try:
            push(node.next_functions)  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):
            continue
    info.nodes = len(seen)
    if hi >= 0:
        info.lo, info.hi = lo, hi
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
