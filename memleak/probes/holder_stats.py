"""What the reference walk found, per holder: how many tensors each holds, their bytes and ages,
and the autograd graphs they keep.

Split from `holders` (the reference walk); `walk.Walk` tallies what it reaches here.
"""

from __future__ import annotations

import collections
import itertools
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from ..records import HolderRow
from .fingerprint import ends
from .graphs import GraphInfo, Roots, graph_info, roots_of
from .identity import Ages, tensor_nbytes
from .pydata import data_size, item_size
from .walk_scope import NAME_ALL_UP_TO, index_bounds, owner_bound

#: Of a holder's graphs, the first this many are kept for `_finish` to measure (the rest counted).
GRAPHS_SAMPLED = 64
#: ...and the newest this many past them walked for the leaf tensors they keep (`_graph_leaves`), within
#: the walk's node budget (newest first): the survivor check looks at the leaves of every entry of a
#: long list, not only of its first ones.
LATE_GRAPHS = 1024


@dataclass
class HolderStats:
    holder: str
    kind: str  # local | global | module_attr | buffer | closure | class_attr | unreachable
    count: float = 0.0
    nbytes: float = 0.0
    n_grad: float = 0.0
    old: float = 0.0  # tensors first seen at least 2 steps ago
    old_bytes: float = 0.0
    host_bytes: float = 0.0  # bytes on another device than the tracked one (CPU copies on a GPU run)
    nodes: int = 0  # autograd graph nodes reachable from its tensors (bounded)
    nodes_capped: bool = False
    seq: tuple | None = None  # lowest and highest node sequence numbers in that graph
    estimated: bool = False
    note: str = ""
    views: float = 0.0  # tensors that are small views of a much larger storage
    arrays: float = 0.0  # tensors reached through numpy arrays or memoryviews that share their memory
    np_arrays: float = 0.0  # numpy arrays with memory of their own (counted as tensors are)
    images: float = 0.0  # images with native pixel memory (PIL: probes/native.py), counted as tensors are
    linked: bool = False  # its graph is built on what it held at the previous sample (graphs.py)
    capacity: int = 0  # the holder is a bounded container (a deque's maxlen): the most items it keeps
    length: int = 0  # the items it holds
    objects: float = 0.0  # items of plain Python data it holds (numbers, strings, lists of floats: pydata)
    obj_bytes: float = 0.0  # their estimated bytes
    largest: int = 0  # its largest storage's bytes (what a view of it keeps alive at most)
    _first: Any = field(default=None, repr=False)  # a weak reference to its first tensor (for `ends`)
    # storage -> [bytes, weight, old, host]: summed into nbytes, old_bytes, host_bytes at the end
    _storages: dict = field(default_factory=dict, repr=False)
    _grad_fns: list = field(default_factory=list, repr=False)
    _out_nrs: list = field(default_factory=list, repr=False)
    # the newest graphs past the sampled ones (a long list's later entries): walked for their leaves only
    _late_fns: collections.deque = field(default_factory=lambda: collections.deque(maxlen=LATE_GRAPHS), repr=False)

    def row(self, stored: str = "") -> HolderRow:
        """The holder's row of the ``holders`` record; `stored`: the user's line that stores into it."""
        return HolderRow(
            holder=self.holder,
            kind=self.kind,
            count=round(self.count, 1),
            bytes=int(self.nbytes),
            grad=round(self.n_grad, 1),
            old=round(self.old, 1),
            old_bytes=int(self.old_bytes),
            nodes=self.nodes,
            seq=self.seq,
            linked=self.linked,
            host_bytes=int(self.host_bytes),
            capped=self.nodes_capped,
            estimated=self.estimated,
            note=self.note,
            views=round(self.views, 1),
            arrays=round(self.arrays, 1),
            np_arrays=round(self.np_arrays, 1),
            images=round(self.images, 1),
            stored=stored,
            capacity=self.capacity,
            length=self.length,
            objects=round(self.objects, 1),
            obj_bytes=int(self.obj_bytes),
            ends=ends(self._first()) if self.count == 1 and self._first is not None else "",  # a lone tensor's
            largest=self.largest if self.views else 0,
        )


def _storages(items: list) -> set[int]:
    """The storage keys (`tensor_nbytes`, as `_held` counts them) of the tensors among `items`."""
    return {tensor_nbytes(it)[0] for it in items if issubclass(type(it), torch.Tensor)}


def _one_level_down(items):
    """Each item, and for a dict, tuple or list item, its values."""
    for it in items:
        yield it
        t = type(it)
        if t is dict:
            yield from it.values()
        elif t is tuple or t is list:
            yield from it


class HolderTally:
    """The tensors a walk reached: `holders` by name, `tensor_holder` by tensor id, and `roots`,
    per holder, what its tensors' graphs start at (for the next walk)."""

    def __init__(
        self,
        *,
        step: int,
        exclude: set[int],
        ages: Ages,
        graph_cap: int,
        device_type: str | None,
        prev_roots: dict[str, Roots] | None,
    ):
        self.step = step
        self.prev_roots = prev_roots or {}
        self.roots: dict[str, Roots] = {}
        self.device_type = device_type
        self.exclude = exclude
        self.ages = ages
        self.graph_cap = graph_cap
        self.holders: dict[str, HolderStats] = {}
        self.tensor_holder: dict[int, str] = {}
        #: leaf tensors only a holder's graph keeps (`GraphInfo.leaves`), alive while the walk's ids are used
        self.graph_leaves: list[torch.Tensor] = []
        #: tensors whose memory a numpy array or memoryview shares (``t.numpy()``), by id
        self.array_bases: set[int] = set()
        #: containers whose owner keeps their bound (``self.capacity`` beside ``self.items``), by id
        self.bounds: dict[int, int] = {}
        #: items of each container that is its holder itself (for a bound its code keeps: `bounds`)
        self.lengths: dict[str, int] = {}
        #: the attributes of each object walked, by its path (where that bound is an attribute)
        self.attrs_of: dict[str, dict] = {}
        #: holders with a long container whose two ends share no storage (`_long_sampled`)
        self.spread: set[str] = set()

    def _bound_children(self, obj: Any, attrs: dict, path: str) -> None:
        """An object's attributes (at `path`): the containers beside a bound (`owner_bound`: a replay memory's
        ``capacity``) that have not passed it are bounded by it; a Dataset's memo by its length (`index_bounds`)."""
        self.attrs_of[path] = attrs
        cap = owner_bound(attrs)
        if cap is not None:
            for v in attrs.values():
                if isinstance(v, (list, dict, collections.deque)) and len(v) <= cap:
                    self.bounds[id(v)] = cap
        for memo, n in index_bounds(obj, attrs):
            self.bounds[id(memo)] = n

    def _note_bound(self, obj: Any, n: int, holder: str, own_name: str) -> None:
        """A container that is its holder itself and has a bound (a deque's maxlen, or its owner's capacity):
        the bound and its length, for the detectors' "still filling up" (`detect/bounded.filling_bounded`)."""
        if holder != own_name:
            return
        self.lengths[holder] = n
        cap = getattr(obj, "maxlen", None) if isinstance(obj, collections.deque) else None
        cap = cap or self.bounds.get(id(obj))
        if cap:
            st = self._stats(holder, "")
            st.capacity, st.length = cap, n

    def _long_sampled(self, obj: Any, items: list, holder: str) -> None:
        """A long container walked by its ends (`items`, head then tail): its counts are estimates,
        every entry is named (`_name_unsampled`), and where its two ends keep tensors of no storage
        in common (the rows of each step's batch, ``rows.extend(out)``), a storage its sampled
        items share stands for one per stretch of the container, not one in all (`spread`)."""
        self._estimated(holder)
        self._name_unsampled(obj, holder)
        half = len(items) // 2
        head, tail = _storages(items[:half]), _storages(items[half:])
        if head and tail and not head & tail:
            self.spread.add(holder)

    def _name_unsampled(self, items, holder: str) -> None:
        """Map every tensor in a long container, or in the dicts, tuples and lists it holds (a
        record per step), to its holder. Only the ends are measured (sampled), but an id lookup
        is cheap, and without it tensors born in the middle would look held by nothing."""
        late = None
        for it in itertools.islice(_one_level_down(items), NAME_ALL_UP_TO):
            if issubclass(type(it), torch.Tensor):
                self.tensor_holder.setdefault(id(it), holder)
                self._name_base(it, holder)
                kept = graph_kept(it)
                if kept is not None:  # its graph's leaves are the holder's too (`_finish`)
                    late = self._stats(holder, "")._late_fns if late is None else late
                    late.append(kept[0])

    def _name_base(self, t: torch.Tensor, holder: str) -> None:
        """The base a view keeps alive is held by the view's holder too: a view and its base
        are one cause, not a second tensor held by nothing."""
        base = t._base
        if base is not None:
            self.tensor_holder.setdefault(id(base), holder)

    def _plain_data(self, obj: Any, holder: str, kind: str, weight: float, note: str) -> bool:
        """Tally a container of plain Python data (numbers, strings, nested lists and dicts of
        them) under `holder`, by its items and estimated bytes; False, tallying nothing, when a
        sampled item is anything else (a tensor, an array, an object): the walk goes into those."""
        sized = data_size(obj)
        if sized is None:
            return False
        st = self._noted(holder, kind, note)
        st.objects += sized[0] * weight
        st.obj_bytes += sized[1] * weight
        return True

    def _buffer(self, obj: Any, holder: str, kind: str, weight: float, note: str) -> None:
        """A buffer of plain data held by itself (a bytearray or BytesIO written to every step): one
        object, and its bytes (which grow where the buffer does)."""
        st = self._noted(holder, kind, note)
        st.objects += weight
        st.obj_bytes += (item_size(obj) or 0) * weight

    def _estimated(self, holder: str) -> None:
        self._stats(holder, "").estimated = True

    def _noted(self, holder: str, kind: str, note: str) -> HolderStats:
        """The holder's stats, with `note` as its note unless it has one."""
        st = self._stats(holder, kind)
        if note and not st.note:
            st.note = note
        return st

    def _stats(self, holder: str, kind: str) -> HolderStats:
        st = self.holders.get(holder)
        if st is None:
            st = self.holders[holder] = HolderStats(holder, kind)
        elif not st.kind:
            st.kind = kind
        return st

    def _tensor(self, t: torch.Tensor, holder: str, kind: str, weight: float, note: str) -> None:
        if id(t) in self.exclude:  # the model's own (a parameter that is not is counted where it is kept)
            return
        key, nb = tensor_nbytes(t)
        st = self._held(t, key, nb, holder, kind, weight, note)
        if st.count == weight:  # the holder's first tensor: its values' ends are read if it stays alone
            st._first = weakref.ref(t)
        self.tensor_holder[id(t)] = holder
        self._name_base(t, holder)
        if nb > 2 * t.numel() * t.element_size():  # a small view keeping a large storage alive
            st.views += weight
        if id(t) in self.array_bases:
            st.arrays += weight
        kept = graph_kept(t)
        if kept is not None:
            self._keeps_graph(st, *kept, weight)

    def _graph_node(self, fn: Any, holder: str, kind: str, weight: float, note: str) -> None:
        """An autograd node kept by itself (``fns.append(loss.grad_fn)``): the graph it starts
        keeps every tensor saved for its backward, counted as a tensor's graph is."""
        self._keeps_graph(self._noted(holder, kind, note), fn, 0, weight)

    @staticmethod
    def _keeps_graph(st: HolderStats, fn: Any, output_nr: int, weight: float) -> None:
        """One more graph the holder keeps: counted, and the first GRAPHS_SAMPLED kept for `_finish`
        to measure."""
        st.n_grad += weight
        if len(st._grad_fns) < GRAPHS_SAMPLED:
            st._grad_fns.append(fn)
            st._out_nrs.append(output_nr)
        else:
            st._late_fns.append(fn)

    def _array(self, a: Any, holder: str, kind: str, weight: float, note: str) -> None:
        """A numpy array with memory of its own: counted, with its bytes and age, as a tensor is
        (host memory: on another device than a GPU run's)."""
        st = self._held(a, a.__array_interface__["data"][0], int(a.nbytes), holder, kind, weight, note)
        st.np_arrays += weight

    def _image(self, img: Any, key: int, nb: int, holder: str, kind: str, weight: float, note: str) -> None:
        """An image with pixel memory of its own (probes/native.py): counted, with its bytes and
        age, as an array with memory of its own is."""
        self._held(img, key, nb, holder, kind, weight, note).images += weight

    def _storage(self, s: Any, holder: str, kind: str, weight: float, note: str) -> None:
        """A tensor's storage kept without its tensor (``t.untyped_storage()``, ``t.storage()``):
        its bytes and age, counted as a tensor's are."""
        s = getattr(s, "_untyped_storage", s)  # a TypedStorage wraps one
        self._held(s, s.data_ptr(), s.nbytes(), holder, kind, weight, note)

    def _held(self, obj: Any, key: int, nb: int, holder: str, kind: str, weight: float, note: str) -> HolderStats:
        """Count `obj` (a tensor, a storage, or an array with memory of its own) under `holder`: one more item,
        its age, and its storage `key` of `nb` bytes."""
        st = self._noted(holder, kind, note)
        st.count += weight
        old = self.step - self.ages.first_seen(obj, self.step) >= 2
        if old:
            st.old += weight
        seen = st._storages.get(key)
        if seen is None:
            device = obj.device.type if isinstance(obj, (torch.Tensor, torch.UntypedStorage)) else "cpu"
            host = self.device_type is not None and device != self.device_type
            st._storages[key] = [nb, weight, old, host]
        else:
            # a storage that two sampled tensors share is one storage, not one per element of a
            # long container (a list of aliases, of state_dict()s): its bytes count once, unless
            # the container's ends share none (each stretch of it has storages of its own)
            if holder not in self.spread:
                seen[1] = 1.0
            seen[2] = seen[2] or old
        return st

    def _finish(self) -> None:
        """Sum each holder's storages, measure its graphs (largest first, within a shared node
        budget) and drop the references the tally kept to do it."""
        for st in self.holders.values():
            for nb, weight, old, host in st._storages.values():
                st.nbytes += nb * weight
                st.old_bytes += nb * weight if old else 0.0
                st.host_bytes += nb * weight if host else 0.0
                st.largest = max(st.largest, nb)
        left = self.graph_cap * 4
        for st in sorted(self.holders.values(), key=lambda s: -len(s._grad_fns)):
            now = roots_of(zip(st._grad_fns, st._out_nrs, strict=True)) if st._grad_fns else set()
            if st._grad_fns and left > 0:
                info: GraphInfo = graph_info(
                    st._grad_fns, min(self.graph_cap, left), self.prev_roots.get(st.holder), now
                )
                st.nodes, st.nodes_capped, st.linked = info.nodes, info.capped, info.linked
                # graphs of tensors the walk sampled past (long containers, over GRAPHS_SAMPLED with a grad_fn)
                # were not counted: the count is a lower bound, as at the cap
                st.nodes_capped |= st.n_grad > len(st._grad_fns) + 0.5
                if info.lo is not None:
                    st.seq = (info.lo, info.hi)
                self._graph_leaves(info.leaves, st.holder)
                left -= st.nodes
                if st._late_fns and left > 0:  # not counted (the count says it is a lower bound): their leaves only
                    late = graph_info(list(st._late_fns), min(self.graph_cap, left))
                    self._graph_leaves(late.leaves, st.holder)
                    left -= late.nodes
            if now:
                self.roots[st.holder] = now
            st._grad_fns = []
            st._out_nrs = []
            st._late_fns.clear()
            st._storages = {}

    def _graph_leaves(self, leaves: list, holder: str) -> None:
        """Leaves that `holder`'s graphs keep (an input made to require grad, a tensor given to
        `torch.autograd.grad`): held by it for the survivor check, unless reached by a root
        already or the run's own (parameters)."""
        for leaf in leaves:
            if id(leaf) not in self.exclude and isinstance(leaf, torch.Tensor):
                self.tensor_holder.setdefault(id(leaf), holder)
                self.graph_leaves.append(leaf)


def holder_sizes(holders: dict[str, HolderStats], buffers: dict[str, list], owned: int) -> dict[str, tuple]:
    """What a walk found held, as `compare_sizes` takes it: per holder its tensors, their bytes,
    the autograd graph nodes they keep and its plain Python data's bytes; per buffer of the model
    its elements and bytes; and how many tensors the model and optimizer own (a model that adds
    layers as it runs)."""
    sizes: dict[str, tuple] = {name: (h.count, h.nbytes, h.nodes, h.obj_bytes) for name, h in holders.items()}
    sizes.update((f"buffer {path}", (numel, nb, 0, 0)) for path, (numel, nb) in buffers.items())
    sizes["owned tensors"] = (owned, 0, 0, 0)
    return sizes


#: A holder the last walk did not find counts as grown (`compare_sizes`, `new=True`) from this many
#: tensors on.
NEW_HOLDER_TENSORS = 2


def compare_sizes(before: dict[str, tuple], after: dict[str, tuple], new: bool = False) -> tuple[bool, float]:
    """Of the holders both walks found: whether one holds more tensors, tensor bytes or graph nodes
    in the second, and the most plain-data bytes one gained; with `new`, a holder only the second
    found holding NEW_HOLDER_TENSORS tensors or more has grown too (walks far apart: a list filled
    since the last one)."""
    tensors, data = False, 0.0
    for name, now in after.items():
        was = before.get(name)
        if was is None:
            tensors = tensors or (new and now[0] >= NEW_HOLDER_TENSORS)
        else:
            tensors = tensors or any(a > b for a, b in zip(now[:3], was[:3], strict=True))
            data = max(data, now[3] - was[3])
    return tensors, data


def graph_kept(t: torch.Tensor) -> tuple[Any, int] | None:
    """(the autograd node, its output) whose graph `t` keeps alive: its own grad_fn, or, for a view
    made under no_grad of a tensor with a graph (what a metric's update stores of the predictions
    it is given), its base's, which the view keeps alive."""
    if t.grad_fn is not None:
        return t.grad_fn, t.output_nr
    base = t._base
    if base is not None and base.grad_fn is not None:
        return base.grad_fn, base.output_nr
    return None
