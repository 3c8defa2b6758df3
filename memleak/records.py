"""The detail records probes write on their sampled steps, as frozen dataclasses.

Every field a probe writes is declared here, with its type, and with a default where a run
file may lack it (files from older versions, fields a probe writes only when they say
something). Probes build these and hand ``rec.to_dict()`` to ``ctx.emit``; `Run.holders`,
`Run.births`, `Run.saved` and `Run.module_records` give them back, built by ``from_dict``
from the run file's record dicts (unknown keys ignored: a newer file still loads).

``to_dict`` writes the fields the probe always wrote, and the others only when they differ
from their default (``None`` is never written), so a run file is as small as with plain dicts.

Plain dataclasses only: this module imports nothing from torch, pandas or the rest of memleak.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

R = TypeVar("R", bound="_Record")

#: How one field is read and written: (name, the slot's setter, its default (MISSING when it has
#: none), the factory of a fresh default, what turns its JSON value into the field's value (None:
#: kept as it is), written only when not at its default).
_Field = tuple[str, Callable[[Any, Any], None], Any, Callable[[], Any] | None, Callable[[Any], Any] | None, bool]
_FIELDS: dict[type, tuple[_Field, ...]] = {}
#: Per record class, the function that builds one from a record dict, and the one that writes it back.
_READERS: dict[type, Callable[[Mapping[str, Any]], Any]] = {}
_WRITERS: dict[type, Callable[[Any], dict[str, Any]]] = {}


def _fields_of(cls: type) -> tuple[_Field, ...]:
    """How each field of a record class is read and written, in order (worked out once per class)."""
    got = _FIELDS.get(cls)
    if got is None:
        got = _FIELDS[cls] = tuple(_field_spec(cls, f) for f in fields(cls))
    return got


def _field_spec(cls: Any, f: Any) -> _Field:
    """How the field `f` of the record class `cls` is read and written (see _Field)."""
    row = cls.NESTED.get(f.name)
    read: Callable[[Any], Any] | None = None
    if row is not None:
        row_of = row._row_reader()
        read = lambda v: tuple([row_of(r) for r in v])
    elif f.name in cls.TUPLES:
        read = tuple
    factory = None if f.default_factory is MISSING else f.default_factory
    return (f.name, getattr(cls, f.name).__set__, f.default, factory, read, f.name in cls.OPTIONAL)


def _reader(cls: type) -> Callable[[Mapping[str, Any]], Any]:
    """The function that builds a `cls` from a record dict (made once per class)."""
    got = _READERS.get(cls)
    if got is None:
        got = _READERS[cls] = _compile_reader(cls)
    return got


def _compile_reader(cls: type) -> Callable[[Mapping[str, Any]], Any]:
    """A function that builds a `cls` from a record dict, written out field by field and compiled
    (as dataclasses writes ``__init__``): it reads only the declared keys, so unknown ones are
    ignored, gives absent ones their default, and sets the slots directly. A long run has hundreds
    of thousands of rows: this is about three times faster than filtering the keys for ``cls(**kw)``."""
    env: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = ["def read(d):", "    rec = new(cls)", "    get = d.get"]
    for i, (name, put, default, factory, read, _) in enumerate(_fields_of(cls)):
        env.update({f"put{i}": put, f"default{i}": default, f"factory{i}": factory, f"read{i}": read})
        if factory is not None:
            value = f"factory{i}() if (v := get({name!r})) is None else v"
        elif default is MISSING:
            value = f"d[{name!r}]" if read is None else f"read{i}(d[{name!r}])"
        elif read is not None:
            value = f"default{i} if (v := get({name!r})) is None else read{i}(v)"
        else:
            value = f"get({name!r}, default{i})"
        lines.append(f"    put{i}(rec, {value})")
    exec("\n".join([*lines, "    return rec"]), env)
    return env["read"]


def _writer(cls: type) -> Callable[[Any], dict[str, Any]]:
    """The function that writes a `cls` as its record dict (made once per class)."""
    got = _WRITERS.get(cls)
    if got is None:
        got = _WRITERS[cls] = _compile_writer(cls)
    return got


def _compile_writer(cls: Any) -> Callable[[Any], dict[str, Any]]:
    """A function that writes a `cls` as its JSON record body, field by field (compiled like the
    reader: probes write one on every sampled step): no None, optional fields only when not at
    their default, rows and tuples as lists."""
    env: dict[str, Any] = {}
    lines = ["def write(rec):", "    out = {}"]
    for i, (name, _, default, _, read, omit) in enumerate(_fields_of(cls)):
        row = cls.NESTED.get(name)
        env[f"default{i}"] = default
        env[f"dump{i}"] = row._row_writer() if row is not None else None
        value = f"[dump{i}(r) for r in v]" if row is not None else "list(v)" if read is tuple else "v"
        skip = f" and v != default{i}" if omit else ""
        lines += [f"    v = rec.{name}", f"    if v is not None{skip}:", f"        out[{name!r}] = {value}"]
    exec("\n".join([*lines, "    return out"]), env)
    return env["write"]


class _Record:
    """What every detail record and row can do: be read from the run file's dict, and written back."""

    __slots__ = ()
    #: Fields written only when not at their default (as the probes always did).
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()
    #: Fields holding rows: the field's name -> the row class (its list becomes a tuple of rows).
    NESTED: ClassVar[Mapping[str, Any]] = {}
    #: Fields holding a short JSON list, kept as a tuple.
    TUPLES: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def from_dict(cls: type[R], d: Mapping[str, Any]) -> R:
        """The record from a run-file record dict: keys it does not declare are ignored (the
        record's ``type``, a rank, a field of a newer memleak), fields it lacks take their default."""
        try:
            return _reader(cls)(d)
        except KeyError as e:
            raise TypeError(f"a {cls.__name__} record, or one of its rows, lacks the field {e}: {d!r:.200}") from None

    @classmethod
    def _row_reader(cls) -> Callable[[Any], Any]:
        """How a parent record reads this row from its JSON value (a dict)."""
        return _reader(cls)

    @classmethod
    def _row_writer(cls) -> Callable[[Any], Any]:
        """How a parent record writes this row (a dict)."""
        return _writer(cls)

    def to_dict(self) -> dict[str, Any]:
        """The JSON record body: optional fields only when not at their default, no None; rows
        and tuples as lists."""
        return _writer(type(self))(self)


class _Positional(_Record):
    """A row written as a JSON list of its fields, in order (compact: modules write many)."""

    __slots__ = ()

    @classmethod
    def _row_reader(cls) -> Callable[[Any], Any]:
        """How a parent record reads this row from its JSON value (a list)."""
        n = len(_fields_of(cls))
        return lambda v: cls(*v[:n])  # values a newer memleak appends are ignored

    @classmethod
    def _row_writer(cls) -> Callable[[Any], Any]:
        """How a parent record writes this row: a list of its fields, in order."""
        names = [f[0] for f in _fields_of(cls)]
        return lambda row: [getattr(row, name) for name in names]


# ---------------------------------------------------------------- holders (the reference walk)


@dataclass(frozen=True, slots=True)
class HolderRow(_Record):
    """One holder at one walk: a variable, attribute, container or closure cell holding tensors."""

    holder: str  # the path a person would type: `history`, `metric.preds`, `blocks.1.attn.cache`
    # local, global, class_attr, module_attr, param_attr (hung on a parameter), closure, optimizer_attr,
    # optimizer_params, default_arg, hook, lru_cache, jit (functions torch.jit.trace compiled), ...
    kind: str = ""
    count: float = 0  # tensors held (one decimal: a long container's are estimated from its ends)
    bytes: int = 0  # bytes of their storages
    grad: float = 0  # of them, tensors with a grad_fn
    old: float = 0  # of them, tensors first seen at least two steps earlier
    old_bytes: int = 0  # bytes of the old ones
    nodes: int = 0  # autograd nodes reachable from their grad_fns (capped)
    seq: tuple[int, int] | None = None  # lowest and highest node sequence numbers of that graph, for graph links
    linked: bool = False  # its graph reaches what it held at the previous walk
    host_bytes: int = 0  # bytes on another device than the tracked one (CPU copies on a GPU run)
    capped: bool = False  # the node count hit its cap
    estimated: bool = False  # counts of long containers estimated from their ends
    note: str = ""  # what the walk noted about it (a generator's frame, a container it skipped)
    views: float = 0  # of them, small views that keep a much larger storage alive
    stored: str = ""  # file.py:line in the user's code that stores into it (the append, the assignment)
    arrays: float = 0  # of them, tensors reached through numpy arrays or memoryviews that share their memory
    np_arrays: float = 0  # of what it holds, numpy arrays with memory of their own (counted as tensors)
    images: float = 0  # of what it holds, images with native pixel memory (PIL), counted as tensors
    capacity: int = 0  # the holder is a bounded container: the most items it keeps (a deque's maxlen)
    length: int = 0  # and the items it held at this walk
    objects: float = 0  # items of plain Python data it holds (numbers, strings, lists of floats), not tensors
    obj_bytes: int = 0  # their bytes, estimated from a few items at its ends (probes/pydata.py)
    ends: str = ""  # one tensor held: hashes of its first and last values (probes/fingerprint.py)
    largest: int = 0  # a holder of views: its largest storage's bytes (what one view keeps alive at most)

    OPTIONAL = frozenset(
        {
            "seq",
            "linked",
            "host_bytes",
            "capped",
            "estimated",
            "note",
            "views",
            "stored",
            "arrays",
            "np_arrays",
            "images",
            "capacity",
            "length",
            "objects",
            "obj_bytes",
            "ends",
            "largest",
        }
    )
    TUPLES = frozenset({"seq"})

    @property
    def held_bytes(self) -> int:
        """The bytes it holds: its tensors' storages and its plain Python data (a heap of the best
        checkpoints' bytes, an lru_cache's token lists)."""
        return self.bytes + self.obj_bytes


@dataclass(frozen=True, slots=True)
class HoldersRecord(_Record):
    """The ``holders`` record: one reference walk, its largest holders first (probes/holders.py)."""

    step: int  # the deep step the walk ran at
    holders: tuple[HolderRow, ...] = ()  # at most 60, largest first
    buffers: dict[str, list] = field(default_factory=dict, hash=False)  # module path -> [numel, bytes]
    walk_seconds: float = 0.0  # what the walk took
    nodes_walked: int = 0  # objects the walk visited
    truncated: bool = False  # the walk stopped at its node budget
    scope: str = ""  # "model" when only the model tree was walked (level modules), "" for the full walk

    OPTIONAL = frozenset({"scope"})
    NESTED = {"holders": HolderRow}


# ---------------------------------------------------------------- births (surviving tensors by site)


@dataclass(frozen=True, slots=True)
class BirthCohort(_Record):
    """Tensors created at one site on one sampled step that are still alive."""

    born: int  # the deep step they were created on
    site: str  # file.py:line in the user's code
    holder: str = ""  # what holds them, "" when the walk reached none
    count: int = 0  # tensors
    bytes: int = 0  # bytes of their storages (each storage once)
    grad: int = 0  # of them, tensors with a grad_fn
    cycle: str = ""  # "grad", "ctx:Function", "saved:Function", "packed:hook", "hook:fn": an autograd cycle holds them

    OPTIONAL = frozenset({"cycle"})


@dataclass(frozen=True, slots=True)
class BirthsRecord(_Record):
    """The ``births`` record: tensors tagged on earlier deep steps still alive, by cohort (probes/tensors.py)."""

    step: int  # the deep step they were checked at
    cohorts: tuple[BirthCohort, ...] = ()  # oldest first, largest first within a step; at most 200
    gc2: int | None = None  # full collections of Python's cyclic collector so far (None: an older file)
    final: bool = False  # the check when the run ended (level auto), after the loop's last step

    NESTED = {"cohorts": BirthCohort}
    OPTIONAL = frozenset({"final"})


# ---------------------------------------------------------------- saved (tensors saved for backward)


@dataclass(frozen=True, slots=True)
class SavedCohort(_Record):
    """Tensors saved for backward at one site on one sampled step that a graph still holds."""

    born: int  # the deep step they were saved on
    site: str = "?"  # file.py:line in the user's code, "?" when there is none
    count: int = 0  # tensors
    bytes: int = 0  # bytes of their storages (each storage once)


@dataclass(frozen=True, slots=True)
class SavedRecord(_Record):
    """The ``saved`` record: saved-for-backward tensors from earlier deep steps that a graph
    still holds (probes/tensors.py)."""

    step: int  # the deep step they were checked at
    cohorts: tuple[SavedCohort, ...] = ()  # by birth step and site
    tagged: dict[str, list] = field(default_factory=dict, hash=False)  # birth step -> [count, bytes] saved then

    NESTED = {"cohorts": SavedCohort}


# ---------------------------------------------------------------- modules (per-module memory)


@dataclass(frozen=True, slots=True)
class ModuleRow(_Positional):
    """One module's memory over the steps a ``modules`` record sums (a list in the file)."""

    path: str  # the module's path in the model ("<root>" for the model itself)
    calls: int = 0  # forward calls over those steps
    fwd_bytes: int = 0  # the counter's rise across its forward, per step (activation memory, children included)
    bwd_bytes: int = 0  # the rise from its output gradient to its input gradient on the detail step
    left_bytes: int = 0  # bytes of its outputs still alive at the end of the detail step


@dataclass(frozen=True, slots=True)
class ModuleOutputs(_Positional):
    """Outputs a module made on an earlier detail step that are still alive (a list in the file)."""

    path: str  # the module's path in the model
    born: int  # the detail step they were made on
    count: int = 0  # tensors
    bytes: int = 0  # bytes of their storages


@dataclass(frozen=True, slots=True)
class RegisteredRow(_Positional):
    """A module whose registered entries (submodules, parameters, buffers, hooks) changed in number since
    the probe first saw it: a container that gains a module every step (a list in the file)."""

    path: str  # the module's path in the model ("<root>" for the model itself)
    first: int  # its direct submodules + parameters + buffers + hooks when first seen
    entries: int  # ... now
    bytes: int = 0  # parameters and buffers of its whole subtree (a row of hooks: the hooks' own objects)
    grad_bytes: int = 0  # gradients of those parameters
    state_bytes: int = 0  # the optimizer's state for those parameters
    newest: str = ""  # the path of its newest entry (`heads.head_29`; hooks: the dict and its newest hook's code)
    grew: str = ""  # the registry that changed most: "submodules", "parameters", "buffers" or "hooks" ("": older files)


@dataclass(frozen=True, slots=True)
class ModulesRecord(_Record):
    """The ``modules`` record: per-module memory deltas since the last detail step (probes/modules.py)."""

    step: int  # the detail step it was written at
    steps: int = 1  # steps this record sums over
    counter: str = ""  # the memory counter the deltas were read from: cuda_allocated, heap, ...
    categories: dict[str, int] = field(default_factory=dict, hash=False)  # parameter, buffer, gradient, ... bytes
    modules: tuple[ModuleRow, ...] = ()  # the modules that ran or left outputs alive
    alive: tuple[ModuleOutputs, ...] = ()  # outputs from earlier detail steps still alive
    registered: tuple[RegisteredRow, ...] = ()  # modules whose registered entries changed in number
    input_shape: str = ""  # the model's first input tensor's shape on the detail step ("16x3x32x32")

    NESTED = {"modules": ModuleRow, "alive": ModuleOutputs, "registered": RegisteredRow}
    OPTIONAL = frozenset({"registered", "input_shape"})


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Event:
    """An ``event`` record: something that happened once (docs/run-format.md lists them)."""

    event: str  # probe_skipped, probe_failed, probe_limited, leak_confirmed, gc_returned, oom, snapshot, ...
    details: dict[str, Any] = field(default_factory=dict, hash=False)  # its other fields: probe, reason, step, ...

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Event:
        return cls(str(d["event"]), {k: v for k, v in d.items() if k not in ("event", "type")})

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.event, **self.details}
