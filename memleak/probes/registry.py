"""Modules whose registered entries change in number: a container that gains a submodule or a
parameter on every step (`self.heads[f"head_{step}"] = nn.Linear(...)` inside forward).

Such parameters are no survivors and no attribute the walk names (both leave out parameters and
submodules by identity), and the memory categories only say that parameters grow. On each detail
step the ModuleProbe counts, for every module of the model, its direct submodules, parameters and
buffers, and writes a `RegisteredRow` for each module whose count differs from the one it had
when first seen. Only paths and counts are kept (no reference to a module), bounded in number.
"""

from __future__ import annotations

from ..records import RegisteredRow
from .identity import state_tensors, user_path

#: Modules whose counts are remembered (a leak of a million modules stops adding new ones).
MAX_PATHS = 100_000
#: Rows written per record, the biggest changes first.
MAX_ROWS = 8


#: A module's three registries, in the order `_entries` counts them and rows name them.
KINDS = ("submodules", "parameters", "buffers")


def _entries(m) -> tuple[int, int, int]:
    return len(m._modules), len(m._parameters), len(m._buffers)


def _nbytes(t) -> int:
    try:
        return t.numel() * t.element_size()
    except Exception:  # a tensor subclass that cannot say
        return 0


class Registry:
    """The number of registered entries of each module path, as first seen."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[int, int, int]] = {}

    def rows(self, model, optimizer=None) -> tuple[RegisteredRow, ...]:
        """A row for each module whose entries differ in number from when it was first seen."""
        changed = []
        for name, m in model.named_modules():
            path = user_path(name) or "<root>"
            n = _entries(m)
            first = self.first.get(path)
            if first is None:
                if len(self.first) < MAX_PATHS:
                    self.first[path] = n
                continue
            if n != first:
                changed.append((path, m, first, n))
        changed.sort(key=lambda c: (-abs(sum(c[3]) - sum(c[2])), c[0]))
        state = getattr(optimizer, "state", None) or {}
        return tuple(_row(path, m, first, n, state) for path, m, first, n in changed[:MAX_ROWS])

    def clear(self) -> None:
        self.first.clear()


def _row(path: str, m, first: tuple[int, int, int], n: tuple[int, int, int], state) -> RegisteredRow:
    size = grads = kept = 0
    for p in m.parameters():
        size += _nbytes(p)
        if p.grad is not None:
            grads += _nbytes(p.grad)
        kept += sum(_nbytes(v) for v in state_tensors(state, p))
    for b in m.buffers():
        size += _nbytes(b)
    grew = max(range(3), key=lambda i: n[i] - first[i])  # the registry that changed most
    reg = (m._modules, m._parameters, m._buffers)[grew]
    newest = next(reversed(reg), "")  # dicts keep insertion order: the last one registered
    if newest:
        newest = newest if path == "<root>" else f"{path}.{newest}"
    return RegisteredRow(path, sum(first), sum(n), size, grads, kept, newest, KINDS[grew])
