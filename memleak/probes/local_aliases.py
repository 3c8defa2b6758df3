"""A local variable that names only the latest of many kept objects.

``ev = Evaluator()`` each epoch, every evaluator also kept in a registry (``_EVALUATORS``): the
walk starts from the frames' locals, so ``ev`` names the newest evaluator's tensors, which look
emptied at each epoch's end (``ev`` moves on to a new one), while the registry names the older
ones, fewer a step than what grows. Where a container holds the object a local names among others
of its kind (its items named ``[...]``), that container's name is the holder's: the local's
holders fold into it (``ev.preds`` into ``_EVALUATORS[...].preds``), so what grows is seen
growing, under the name of what keeps it.
"""

from __future__ import annotations

import sys
from typing import Any

from .frames import is_user_file
from .holder_families import rename_holders
from .holder_stats import HolderTally

#: A method's own object: the better name for what it holds (``self.results``).
_OWN_NAMES = frozenset({"self", "cls"})


def user_instance(name: str, obj: Any) -> bool:
    """Whether local `name` names an object of a class the user's files define on no torch or
    builtin class (a model, an optimizer, a dataset and a dict subclass are named as they are)."""
    if name in _OWN_NAMES:
        return False
    cls = type(obj)
    if any(c.__module__.split(".", 1)[0] in ("builtins", "torch") and c is not object for c in cls.__mro__):
        return False
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return isinstance(path, str) and is_user_file(path)


def fold_aliases(tally: HolderTally, aliases: dict[str, str]) -> None:
    """Each local's holders (the local itself, its attributes and items) under the name of the
    container that holds its object too (`aliases`: local -> that item's path, ``X[...]``)."""
    for local, path in aliases.items():
        for name in [n for n in tally.holders if n == local or n.startswith((local + ".", local + "["))]:
            rename_holders(tally, name, path + name[len(local) :])
