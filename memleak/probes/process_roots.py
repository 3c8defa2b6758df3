"""What the interpreter keeps for the whole process, as walk roots: the handlers set with
``signal.signal`` (a handler that calls the one before it, captured in its closure, keeps every
earlier handler and what each captured), Python's registries of the warnings it has shown (one
entry per message and line: a message that differs each time, a number or a shape in it, adds one
each time, for the life of the process; CPython bpo-27535), and the user's modules imported since
the run began (``sys.modules`` keeps each with its globals: a file loaded under a new name each
step to pick up edits strands one module each time; policyengine-core #520, nupic #332, prefect
#21692).

Split from `holders`, which picks the other roots and runs the walk.
"""

from __future__ import annotations

import signal
import sys
import types
import warnings

from .frames import is_user_file, user_code
from .reach import sampled_ends
from .walk import Walk

#: A registry with fewer entries is not walked: each module that warned once has one.
MIN_REGISTRY = 64
#: Of the user's modules imported since the run began, those walked at each end (the rest scaled from them).
NEW_MODULES_SAMPLED = 8


def add_process_roots(w: Walk, modules_since: int | None = None) -> None:
    """`modules_since`: how many modules sys.modules held when the run began (None: none walked)."""
    _add_signal_handlers(w)
    _add_warning_registries(w)
    if modules_since is not None:
        _add_new_modules(w, modules_since)


_SIGNALS = sorted(signal.valid_signals())


def _add_signal_handlers(w: Walk) -> None:
    for sig in _SIGNALS:
        try:
            fn = signal.getsignal(sig)
            name = signal.Signals(sig).name
        except (ValueError, OSError):
            continue
        if callable(fn) and user_code(getattr(fn, "__func__", fn)):
            w.hook(fn, f"signal {name} (signal.signal)", 1.0)


def _add_warning_registries(w: Walk) -> None:
    note = (
        "Python's record of the warnings it has shown, one entry per message and line, kept for the life of "
        "the process: a message that differs each time adds one each time"
    )
    for name, registry in _registries().items():
        if len(registry) >= MIN_REGISTRY:
            w.add_root(registry, f"{name}.__warningregistry__", "global", note)
    if len(warnings.onceregistry) >= MIN_REGISTRY:  # type: ignore[attr-defined]
        w.add_root(warnings.onceregistry, "warnings.onceregistry", "global", note)  # type: ignore[attr-defined]


#: The modules' registries found so far (a module keeps its registry once made), and how many
#: looks since all modules were read for new ones: reading two thousand modules' globals took 2 ms
#: a walk in a training process, a full share of what level auto may cost.
_FOUND: dict[str, dict] = {}
_LOOKS = [0]
SCAN_EVERY = 4


def _registries() -> dict[str, dict]:
    if _LOOKS[0] % SCAN_EVERY == 0:
        _FOUND.clear()  # anew: a module taken out of sys.modules is not kept by memleak
        for name, module in list(sys.modules.items()):
            try:
                registry = vars(module).get("__warningregistry__")
            except Exception:  # a stand-in without a __dict__ (a lazy loader's)
                continue
            if isinstance(registry, dict):
                _FOUND[name] = registry
    _LOOKS[0] += 1
    return _FOUND


# module name -> whether it is the user's: memleak's own lazy imports (pandas, scipy: a thousand
# modules) come after a run's start too, and are looked at once, not at every walk
_USER_MODULES: dict[str, bool] = {}


def _user_module(name: str, module: object) -> bool:
    user = _USER_MODULES.get(name)
    if user is None:
        top = name.partition(".")[0]
        if top != name and top in sys.modules and not _user_module(top, sys.modules[top]):
            user = False  # a library's submodule (pandas.core.frame): its package says
        else:
            # a file of the user's own (a builtin module has none: `is_user_file("")` says nothing of it)
            file = getattr(module, "__file__", None) or ""
            user = isinstance(module, types.ModuleType) and bool(file) and is_user_file(file)
        _USER_MODULES[name] = user
    return user


def _add_new_modules(w: Walk, since: int) -> None:
    """The globals of the user's modules imported since sys.modules held `since` (it keeps its
    modules in the order they were imported), all under one holder: a module loaded anew each step
    is one more, each holding what the one before held."""
    new = [m for name, m in list(sys.modules.items())[since:] if _user_module(name, m)]
    new, weight = sampled_ends(new, NEW_MODULES_SAMPLED)  # many: their ends, each for its share
    note = "a module imported during the run: sys.modules keeps it, with its globals, for the life of the process"
    for m in new:
        for k, v in list(vars(m).items()):
            if not k.startswith("__") and not isinstance(v, (types.ModuleType, types.FunctionType, type)):
                w.push(v, f"sys.modules[{m.__name__!r}].{k}", "sys.modules", "global", weight, note)
