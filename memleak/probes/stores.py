"""The line that stores into a holder: the `append`, the `+=`, the assignment.

The creation site of a tensor says where it was computed (often a model's
`forward`, far from the bug); the fix belongs where it is kept. Given the
holder's name and the source a frame or class runs, find the statements
that put something into it, read from the source (AST), not from the run.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
from collections.abc import Iterator
from functools import lru_cache

from ..holder_names import leaf_name
from .frames import is_user_file

#: Methods that put an element into a container.
_ADDERS = frozenset(
    {"append", "extend", "insert", "add", "update", "setdefault", "appendleft", "extendleft", "put", "push"}
)
#: Values that start an empty holder: an initialisation, not a store.
_EMPTY_CALLS = frozenset({"list", "dict", "set", "deque", "defaultdict", "OrderedDict", "Counter", "tuple"})


#: pandas' indexers: `frame.loc[k] = row` stores into `frame`.
_INDEXERS = frozenset({"loc", "iloc", "at", "iat"})


def ends_in(node: ast.AST, leaf: str) -> bool:
    """`leaf`, `x.leaf`, `leaf[k]`, `x.leaf[k][j]`, `leaf.get()` (a ContextVar's value, a dict's),
    `leaf.loc[k]` ..."""
    while isinstance(node, ast.Subscript) or _is_get(node):
        node = node.value if isinstance(node, ast.Subscript) else node.func.value  # type: ignore[attr-defined]
        if isinstance(node, ast.Attribute) and node.attr in _INDEXERS:
            node = node.value
    return (isinstance(node, ast.Name) and node.id == leaf) or (isinstance(node, ast.Attribute) and node.attr == leaf)


def _is_get(node: ast.AST) -> bool:
    """`x.get(...)` or `x.setdefault(k, [])`: an item of `x`, as `x[k]` is."""
    fn = node.func if isinstance(node, ast.Call) else None
    return isinstance(fn, ast.Attribute) and fn.attr in ("get", "setdefault")


def _call_name(node: ast.Call) -> str:
    """The name a call is made by: `f(...)` -> f, `x.f(...)` -> f."""
    fn = node.func
    return fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""


def _is_empty(value: ast.AST | None) -> bool:
    if value is None or (isinstance(value, ast.Constant) and value.value in (None, 0, 0.0)):
        return True
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.Tuple)):
        return not getattr(value, "elts", None) and not getattr(value, "keys", None)
    if isinstance(value, ast.Call):
        return _call_name(value) in _EMPTY_CALLS and not value.args
    return False


def adds_to(node: ast.AST, leaf: str) -> bool:
    """Whether an expression calls a method of `leaf` that puts an element into it (``leaf.append(x)``)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _ADDERS
        and ends_in(node.func.value, leaf)
    )


#: Functions that put an element into the container given as their first argument (heapq's, bisect's).
_ADDING_FUNCTIONS = frozenset({"heappush", "heappushpop", "heapreplace", "insort", "insort_left", "insort_right"})


def adds(node: ast.AST, leaf: str) -> bool:
    """Whether an expression puts an item into `leaf`: ``leaf.append(x)``, ``heapq.heappush(leaf, x)``."""
    if not isinstance(node, ast.Call):
        return False
    if _call_name(node) in _ADDING_FUNCTIONS and node.args:
        return ends_in(node.args[0], leaf)
    return adds_to(node, leaf)


#: Calls that bind the attribute named by a string argument: `self.register_buffer("mem", t)`,
#: `setattr(self, "mem", t)` (the name's position among the arguments).
_NAMING_CALLS = {"register_buffer": 0, "register_parameter": 0, "setattr": 1}


def _named_value(node: ast.Call, leaf: str) -> ast.AST | None:
    """The value a naming call (`register_buffer("leaf", value)`, `setattr(obj, "leaf", value)`) binds to `leaf`."""
    at = _NAMING_CALLS.get(_call_name(node))
    if at is None or len(node.args) <= at + 1:
        return None
    name = node.args[at]
    return node.args[at + 1] if isinstance(name, ast.Constant) and name.value == leaf else None


def stores(node: ast.AST, leaf: str) -> bool:
    """Whether one statement or expression puts something into `leaf`."""
    if isinstance(node, ast.Call):
        named = _named_value(node, leaf)
        return not _is_empty(named) if named is not None else adds(node, leaf)
    if isinstance(node, ast.AugAssign):
        return ends_in(node.target, leaf)
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if _is_empty(node.value):
            return False
        return any(ends_in(t, leaf) for t in targets)
    return False


@lru_cache(maxsize=64)
def source_tree(filename: str, mtime: float) -> ast.Module | None:
    source = "".join(linecache.getlines(filename))
    try:
        return ast.parse(source) if source else None
    except (SyntaxError, ValueError):
        return None


def mtime_of(filename: str) -> float | None:
    """When `filename` last changed (its parsed source is cached under it), None if it cannot be read."""
    try:
        return os.stat(filename).st_mtime
    except OSError:
        return None


def span_nodes(tree: ast.Module, first: int, last: int) -> list[ast.AST]:
    """The nodes of `tree` on lines `first` to `last`."""
    return [n for n in ast.walk(tree) if first <= getattr(n, "lineno", 0) <= last]


def store_line(filename: str, first: int, last: int, holder: str) -> int | None:
    """The first line from `first` to `last` of `filename` that stores into `holder`, else None.
    Prefers a line that adds to it (`append`, `+=`, `x[k] = ...`) over one that rebinds it."""
    mtime = mtime_of(filename)
    return None if mtime is None else _store_line(filename, mtime, first, last, leaf_name(holder))


@lru_cache(maxsize=1024)
def _store_line(filename: str, mtime: float, first: int, last: int, leaf: str) -> int | None:
    tree = source_tree(filename, mtime)
    if tree is None:
        return None
    nodes = span_nodes(tree, first, last)
    aliases = _aliases(nodes, leaf)
    adds: list[int] = []
    binds: list[int] = []
    for node in nodes:
        if stores(node, leaf):
            named = _named_value(node, leaf) if isinstance(node, ast.Call) else None
            rebinds = named is not None or (
                isinstance(node, (ast.Assign, ast.AnnAssign))
                and not any(
                    isinstance(t, ast.Subscript)
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                )
            )
            value = named if named is not None else getattr(node, "value", None)
            # a rebind computed from the holder itself grows it (`self.embs = torch.cat([self.embs, x])`)
            (binds if rebinds and not _reads(value, leaf) else adds).append(node.lineno)  # type: ignore[attr-defined]
        elif isinstance(node, ast.Call) and any(adds_to(node, a) for a in aliases):
            adds.append(node.lineno)
    found = sorted(adds) or sorted(binds)
    return found[0] if found else None


def _aliases(nodes: list[ast.AST], leaf: str) -> set[str]:
    """Local names bound to the holder (`lst = _trace.get()`, `buf = self.history[k]`): what is
    appended to them is stored into it."""
    return {
        t.id
        for n in nodes
        if isinstance(n, ast.Assign) and ends_in(n.value, leaf)
        for t in n.targets
        if isinstance(t, ast.Name) and t.id != leaf
    }


def _reads(value: ast.AST | None, leaf: str) -> bool:
    """Whether an expression reads `leaf` (as a name or an attribute)."""
    return value is not None and any(
        (isinstance(n, ast.Name) and n.id == leaf) or (isinstance(n, ast.Attribute) and n.attr == leaf)
        for n in ast.walk(value)
    )


def code_span(code) -> tuple[int, int]:
    """(first, last) line of a code object's source."""
    lines = [line for _, _, line in code.co_lines() if line is not None]
    return code.co_firstlineno, max(lines, default=code.co_firstlineno)


#: A region of source: (file, first line, last line), or a class whose lines are looked up when
#: a store is first looked for in it (`inspect` parses the class's whole file to find them).
Region = tuple[str, int, int] | type


def source_regions(frames: list, classes: list[type]) -> list[Region]:
    """Where a store into a holder is looked for, nearest first: the functions the user's frames
    run, the classes of the model's modules (`classes`, each once), then the whole files of those
    frames."""
    regions: list[Region] = []
    for f in frames:
        regions.append((f.f_code.co_filename, *code_span(f.f_code)))
    regions.extend(classes)
    for f in frames:
        regions.append((f.f_code.co_filename, 1, 1 << 30))
    return list(dict.fromkeys(regions))


@lru_cache(maxsize=256)
def _class_span(cls: type) -> tuple[str, int, int] | None:
    """(file, first, last line) of a class defined in the user's code, else None."""
    try:
        filename = inspect.getsourcefile(cls)
        if not filename or not is_user_file(filename):  # torch's, memleak's or a library's
            return None
        lines, first = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return None
    return filename, first, first + len(lines) - 1


def spans(regions: list[Region]) -> Iterator[tuple[str, int, int]]:
    """(file, first line, last line) of each region of the user's source, nearest first."""
    for region in regions:
        span = _class_span(region) if isinstance(region, type) else region
        if span is not None:  # None: a class of torch's, memleak's or a library's
            yield span


def find_store(holder: str, regions: list[Region]) -> str | None:
    """'file.py:line' of the first region's line that stores into `holder`, else None. A holder
    named through the items of a container (`caches[...].layers`: a list inside what a library
    returns) that no line fills is filled where those items are stored (`caches.append(...)`)."""
    found = _find_store(holder, regions)
    outer = holder.split("[...]", 1)[0]
    return found if found is not None or outer == holder or not outer else _find_store(outer, regions)


def _find_store(holder: str, regions: list[Region]) -> str | None:
    for filename, first, last in spans(regions):
        line = store_line(filename, first, last, holder)
        if line is not None:
            name = os.path.basename(filename)
            if name == "__init__.py":  # which package's
                name = os.path.join(os.path.basename(os.path.dirname(filename)), name)
            return f"{name}:{line}"
    return None


def filled_locals(code) -> list[tuple[str, str]]:
    """(name, type) of the local variables of a function's code that start as an empty container
    and are stored into (``predictions = []`` ... ``predictions.append(item)``: ("predictions",
    "list")), read from its source; not those it only stores plain values into (`_keeps_plain`)."""
    mtime = mtime_of(code.co_filename)
    if mtime is None:
        return []
    return _filled_locals(code.co_filename, mtime, *code_span(code), frozenset(code.co_varnames))


@lru_cache(maxsize=256)
def _filled_locals(filename: str, mtime: float, first: int, last: int, names: frozenset[str]) -> list[tuple[str, str]]:
    tree = source_tree(filename, mtime)
    if tree is None:
        return []
    nodes = span_nodes(tree, first, last)
    started = {
        t.id: _empty_type(v)
        for n in nodes
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t, v in _bindings(n)
        if isinstance(t, ast.Name) and t.id in names and _empty_container(v)
    }
    return sorted(
        (v, kind) for v, kind in started.items() if any(stores(n, v) for n in nodes) and not _keeps_plain(nodes, v)
    )


#: Calls whose result is a plain value, never a tensor: builtins (`errors.append(repr(e))`; not
#: `x.float()`, a tensor's method) and a tensor's numbers read out (`log.append(loss.item())`).
_PLAIN_BUILTINS = frozenset({"str", "repr", "int", "float", "bool", "len", "round", "format"})
_PLAIN_METHODS = frozenset({"item", "tolist"})


def _stored_values(nodes: list[ast.AST], var: str) -> list[ast.AST] | None:
    """The values the statements in `nodes` put into the local `var` (`var.append(x)`, `var[k] = x`,
    `var += x`), or None where one of its stores is of another form."""
    values: list[ast.AST] = []
    for n in nodes:
        if not stores(n, var):
            continue
        if isinstance(n, ast.Call) and adds_to(n, var):
            values += n.args
        elif isinstance(n, ast.Assign) and all(isinstance(t, ast.Subscript) and ends_in(t, var) for t in n.targets):
            values.append(n.value)
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            values.append(n.value)
        else:
            return None
    return values


def _plain(value: ast.AST) -> bool:
    """Whether an expression is surely no tensor: a literal, an f-string, a number read out
    (`.item()`, `float(...)`), or a tuple or list of those."""
    if isinstance(value, (ast.Constant, ast.JoinedStr)):
        return True
    if isinstance(value, (ast.Tuple, ast.List)):
        return all(_plain(e) for e in value.elts)
    if not isinstance(value, ast.Call):
        return False
    fn = value.func
    return (isinstance(fn, ast.Name) and fn.id in _PLAIN_BUILTINS) or (
        isinstance(fn, ast.Attribute) and fn.attr in _PLAIN_METHODS
    )


def _keeps_plain(nodes: list[ast.AST], var: str) -> bool:
    """Whether every store into `var` puts a plain value (an `errors` list of `repr(e)`): it keeps
    no tensor, so it is no candidate for a container found holding tensors."""
    values = _stored_values(nodes, var)
    return values is not None and bool(values) and all(_plain(v) for v in values)


def _empty_container(value: ast.AST | None) -> bool:
    """`[]`, `{}`, `deque()`: not a missing value, a None or a 0, which `_is_empty` also accepts."""
    return value is not None and not isinstance(value, ast.Constant) and _is_empty(value)


def _bindings(node: ast.Assign | ast.AnnAssign) -> Iterator[tuple[ast.AST, ast.AST | None]]:
    """(target, value) pairs of an assignment: `a = []`, `a: list = []`, and each of `a, b = [], {}`."""
    if isinstance(node, ast.AnnAssign):
        yield node.target, node.value
        return
    for t in node.targets:
        if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) and len(t.elts) == len(node.value.elts):
            yield from zip(t.elts, node.value.elts, strict=True)
        else:
            yield t, node.value


def _empty_type(value: ast.AST | None) -> str:
    """The type an empty container's expression makes: `[]` list, `{}` dict, `deque()` deque."""
    if isinstance(value, ast.Call):
        return _call_name(value)
    return {ast.List: "list", ast.Dict: "dict", ast.Set: "set", ast.Tuple: "tuple"}.get(type(value), "")


def called_names(code) -> list[str]:
    """The plain names a function's code calls (`drain(q)` -> drain), read from its source: where
    a thread's target hands its work on to a function of the user's."""
    mtime = mtime_of(code.co_filename)
    tree = None if mtime is None else source_tree(code.co_filename, mtime)
    if tree is None:
        return []
    nodes = span_nodes(tree, *code_span(code))
    return sorted({n.func.id for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)})
