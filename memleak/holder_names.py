"""Holder names that differ only in their numbers: one family, made one per step
(``heads.task7.weight`` is of ``heads.task*.weight``); and the name a person typed last in a
holder's path (`leaf_name`). Torch-free: the report draws a family once, a fix names the leaf.
"""

from __future__ import annotations

import re

# a part of a holder's name that may be numbered: an attribute or variable name
_NAMED = re.compile(r"[A-Za-z_]\w*")
_NUMBER = re.compile(r"\d+")


def family_name(holder: str) -> str | None:
    """`holder` with the numbers in its named parts written ``*`` (``heads.task7.weight``:
    ``heads.task*.weight``), or None when no part is a name with a number. A part that is a number
    alone (``blocks.3.cache``: a ModuleList's layer) is a place in a fixed list, kept as it is."""
    parts = holder.split(".")
    numbered = [bool(_NAMED.fullmatch(p) and _NUMBER.search(p)) for p in parts]
    if not any(numbered):
        return None
    return ".".join(_NUMBER.sub("*", p) if n else p for p, n in zip(parts, numbered, strict=True))


def is_family(holder: str) -> bool:
    """Whether `holder` names a family (`family_name`'s ``*``), not one holder."""
    return "*" in holder


def leaf_name(holder: str) -> str:
    """The last name of a holder path as a person wrote it: `metric.values` -> `values`,
    `logger.history['loss']` -> `history`, `blocks.1.attn.cache` -> `cache`,
    `self.callbacks[...].preds` -> `preds`."""
    name = re.sub(r"\[[^\]]*\]", "", holder.split(" (", 1)[0])  # indices and keys, a closure's suffix
    parts = [p for p in name.replace("()", "").split(".") if p and not p.isdigit()]
    return parts[-1] if parts else name


def attribute_owner(holder: str) -> str | None:
    """The object a holder is an attribute of (`metric.preds` -> `metric`), or None where it is no
    attribute: an entry of a container (`norms['0.weight']`, whose key holds a dot) or a bare name.
    A closure's or thread's suffix stays on the owner (`state.buf (closure of f)` -> `state (closure of f)`)."""
    name, paren, suffix = holder.partition(" (")
    if name.endswith("]"):
        return None
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += name[i] == "]"
        depth -= name[i] == "["
        if name[i] == "." and depth == 0:
            return name[:i] + paren + suffix if i else None
    return None


def thread_local_name(var: str, function: str, thread: str) -> str:
    """A holder that is a local of a function another thread runs, named from that function's code
    (probes/referrers.py): ``predictions (local of metrics_worker() in thread 'Thread-1')``."""
    return f"{var} (local of {function}() in thread {thread!r})"


_THREAD_LOCAL = re.compile(r"(.+) \(local of (.+)\(\) in thread .+\)")


def thread_local_parts(holder: str) -> tuple[str, str] | None:
    """(variable, function) of a holder named by `thread_local_name`, else None."""
    m = _THREAD_LOCAL.fullmatch(holder)
    return (m[1], m[2]) if m else None


def is_thread_local(holder: str) -> bool:
    """Whether `holder` was named by `thread_local_name`."""
    return thread_local_parts(holder) is not None


#: How the walk's note on tensors a caught exception's traceback keeps begins (probes/reach.py);
#: the fix for such a holder is told by it (detect/culprit_fixes.py).
_TRACEBACK_NOTE = "kept through the traceback of a caught"


def traceback_note(exception: str, function: str) -> str:
    """The note on the locals of `function`'s frame that a caught `exception` keeps."""
    return f"{_TRACEBACK_NOTE} {exception}: a local of {function}(), which returned long ago"


def is_traceback_note(note: str) -> bool:
    """Whether `note` was made by `traceback_note` (or holds one)."""
    return _TRACEBACK_NOTE in note
