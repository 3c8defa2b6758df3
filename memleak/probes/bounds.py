"""The bound the user's code trims a container to: a sliding window written by hand.

A list kept to its last N items (``if len(recent) > 100: recent.pop(0)``, ``recent = recent[-100:]``,
``del recent[:-100]``; a heap kept to its best N, ``heapq.heappop(best)``), or filled only while short
of N (``if len(memory) < self.size: memory.append(x)``, a replay memory's), grows like a leak until it
holds N: in a run shorter than that, the counts alone cannot tell them apart, the code can. Read from
the source (AST), as `stores` finds the storing line: N is an int literal, a module-level constant of
the same file (``MAX_KEPT = 100``) or an int attribute of the container's owner
(``len(self.recent) > self.window_size``).
The walk then counts such a container as bounded, as it does a ``deque(maxlen=...)``
(`detect/bounded.filling_bounded`), while it holds no more than N.
"""

from __future__ import annotations

import ast
from functools import lru_cache

from ..holder_names import leaf_name
from .stores import Region, adds, ends_in, mtime_of, source_tree, spans, stores

#: Methods that take items out of a container (a trim, when the window's test guards them).
_TAKERS = frozenset({"pop", "popleft", "popitem", "remove", "clear"})


#: A bound as the source gives it: an int, or the name of an int attribute of the container's
#: owner; and the items it may hold beyond it (1 for ``len(x) > N``, trimmed after the test).
Bound = tuple[int | str, int]


def code_bound(holder: str, regions: list[Region], owner: dict | None = None) -> int | None:
    """The most items the first region that trims `holder` keeps in it, else None; `owner`: the
    attributes of the object that holds it, where the bound is one of them."""
    leaf = leaf_name(holder)
    for filename, first, last in spans(regions):
        mtime = mtime_of(filename)
        if mtime is None:
            continue
        found = _bound(filename, mtime, first, last, leaf)
        if found is not None:
            limit, slack = found
            if isinstance(limit, str):  # the owner's attribute
                value = (owner or {}).get(limit)
                limit = value if type(value) is int and value > 0 else 0
            return limit + slack if limit else None
    return None


@lru_cache(maxsize=1024)
def _bound(filename: str, mtime: float, first: int, last: int, leaf: str) -> Bound | None:
    tree = source_tree(filename, mtime)
    if tree is None:
        return None
    consts = _int_constants(tree)
    for node in ast.walk(tree):
        if not first <= getattr(node, "lineno", 0) <= last:
            continue
        if isinstance(node, (ast.If, ast.While)):
            test = _len_test(node.test, leaf, consts)
            if test is not None:
                n, slack, fills = test
                guarded = adds if fills else _trims
                if any(guarded(s, leaf) for stmt in node.body for s in ast.walk(stmt)):
                    if slack and not fills and _stored_before(tree, node.lineno, leaf):
                        slack = 0  # `x.append(t)`, then `while len(x) > N: x.pop(0)`: N at the step's end
                    return n, slack
        kept = _kept_slice(node, leaf, consts)
        if kept is not None:
            return kept
    return None


def _int_constants(tree: ast.Module) -> dict[str, int]:
    """The file's module-level ``NAME = <positive int>`` assignments."""
    out: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            n = _positive_int(node.value, {})
            if n is not None:
                out[node.targets[0].id] = n
    return out


def _positive_int(node: ast.AST | None, consts: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value > 0:
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    return None


def _limit(node: ast.AST | None, consts: dict[str, int]) -> int | str | None:
    """An int the source gives, or the name of an attribute (``self.window``) it reads."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr
    return _positive_int(node, consts)


def _is_len_of(node: ast.AST, leaf: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "len"
        and len(node.args) == 1
        and ends_in(node.args[0], leaf)
    )


def _len_test(test: ast.AST, leaf: str, consts: dict[str, int]) -> tuple[int | str, int, bool] | None:
    """(N, slack, fills) of ``len(leaf) > N`` (N + 1 items at most: the trim it guards comes after
    the test), ``>= N`` or ``== N``; or, `fills`, of ``len(leaf) < N`` (an add it guards keeps N at
    most) or ``<= N`` (N + 1). Either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if _is_len_of(right, leaf):  # N < len(leaf): turned round
        left, right = right, left
        op = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE(), ast.Gt: ast.Lt(), ast.GtE: ast.LtE()}.get(type(op), op)
    n = _limit(right, consts)
    if n is None or not _is_len_of(left, leaf) or not isinstance(op, (ast.Gt, ast.GtE, ast.Eq, ast.Lt, ast.LtE)):
        return None
    return n, int(isinstance(op, (ast.Gt, ast.LtE))), isinstance(op, (ast.Lt, ast.LtE))


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.AsyncFor, ast.While)


def _stored_before(tree: ast.Module, line: int, leaf: str) -> bool:
    """Whether the innermost function or loop around `line` stores into `leaf` before it: the trim
    on `line` then follows the store, and the container ends the step at its bound, not one over."""
    around = [n for n in ast.walk(tree) if isinstance(n, _SCOPES) and n.lineno < line <= (n.end_lineno or 0)]
    start = max((n.lineno for n in around), default=1)
    return any(start <= getattr(n, "lineno", 0) < line and stores(n, leaf) for n in ast.walk(tree))


def _trims(node: ast.AST, leaf: str) -> bool:
    """Whether a statement or expression takes items out of `leaf` or rebinds it."""
    if isinstance(node, ast.Call) and node.args and _called(node.func) == "heappop":
        return ends_in(node.args[0], leaf)  # heapq.heappop(best): a heap kept to its best N
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in _TAKERS and ends_in(node.func.value, leaf)
    if isinstance(node, ast.Delete):
        return any(isinstance(t, ast.Subscript) and ends_in(t.value, leaf) for t in node.targets)
    if isinstance(node, ast.Assign):
        return any(ends_in(t, leaf) for t in node.targets)
    return False


def _called(func: ast.AST) -> str:
    """The name a call calls: `heappop` of ``heapq.heappop(x)`` and of ``heappop(x)``."""
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _kept_slice(node: ast.AST, leaf: str, consts: dict[str, int]) -> Bound | None:
    """N of ``leaf = leaf[-N:]`` (``leaf[:] = ...`` too) or ``del leaf[:-N]``."""
    if isinstance(node, ast.Assign) and any(ends_in(t, leaf) for t in node.targets):
        s = node.value
        if isinstance(s, ast.Subscript) and ends_in(s.value, leaf) and isinstance(s.slice, ast.Slice):
            if s.slice.upper is None and s.slice.step is None:
                return _negative(s.slice.lower, consts)
    if isinstance(node, ast.Delete) and len(node.targets) == 1:
        t = node.targets[0]
        if isinstance(t, ast.Subscript) and ends_in(t.value, leaf) and isinstance(t.slice, ast.Slice):
            if t.slice.lower is None and t.slice.step is None:
                return _negative(t.slice.upper, consts)
    return None


def _negative(node: ast.AST | None, consts: dict[str, int]) -> Bound | None:
    """N of the slice bound ``-N``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        n = _limit(node.operand, consts)
        return None if n is None else (n, 0)
    return None
