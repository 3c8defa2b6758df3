"""Which tensors survive their step, who holds them, and which graphs outlive their backward.

On sampled ("deep") steps, chosen on a time budget, the TensorProbe

- tags every tensor a torch function returns with its creation site (the
  user's file:line) through a `TorchFunctionMode`, keeping weak references only;
- tags every tensor autograd saves for backward through
  `torch.autograd.graph.saved_tensors_hooks` (the pack hook returns the tensor
  unchanged; it keeps a weak reference);
- at the end of the step, walks references from the user's frames, their
  globals and the model tree (`holders.walk_roots`) and records, per holder,
  the tensors it holds, how many are at least two steps old, and the size of
  the autograd graph they keep (nodes, counted along ``next_functions``);
- tags only in the thread that started the tracker: torch keeps modes and hooks
  per thread, and that thread comes back to take them off (`tagging.py`);
- checks which tensors tagged on earlier deep steps (two or more steps ago)
  are still alive and are not parameters, gradients, buffers or optimizer state,
  and groups them by creation site and holder.

Records (the dataclasses of memleak/records.py; see docs/detectors-culprits.md):

- ``holders``: ``{"step", "holders": [{"holder", "kind", "count", "bytes", "grad", "old", "old_bytes", "nodes", ...}],
  "buffers": {path: [numel, bytes]}, "walk_seconds", "truncated"}``
- ``births``: ``{"step", "cohorts": [{"born", "site", "holder", "count", "bytes", "grad", "cycle"?}]}``
  (``cycle``: "grad" or "ctx:Function" when no root reached the survivors and autograd keeps them in a cycle)
- ``saved``: ``{"step", "cohorts": [{"born", "site", "count", "bytes"}], "tagged": {born: [count, bytes]}}``:
  saved tensors that a graph from an earlier deep step still holds
"""

from __future__ import annotations

import gc
import math
import sys
import threading
import time
import weakref
from typing import Any

import torch

from ..records import BirthsRecord, Event, SavedRecord
from ..schema import RecordType
from . import Level, Probe, ProbeContext
from .budget import young_gap
from .frames import user_frames, user_site
from .holder_stats import compare_sizes, holder_sizes
from .holders import holders_record, walk_roots
from .identity import Ages, excluded_ids, is_compiled, model_modules, tensor_nbytes
from .jit_traces import traced_functions
from .optimizer_params import StartParams
from .outside_held import OutsideHeld
from .referrers import name_by_referrers
from .survivors import Survivors, birth_cohorts, cohorts_per_site, group_births, name_site, saved_cohorts
from .tagging import MAX_TAGS, Box, Tagging, saved_view_of, stacks_empty, sweep
from .thread_held import ThreadHeld

# Deep steps whose tags are kept for checking.
MAX_COHORTS = 12
# gc.get_referrers scans every object: named holders are looked up this often per run at most.
MAX_REFERRER_LOOKUPS = 3
# Deep steps come at least this often, whatever they cost (a leak needs a few samples to show).
MAX_GAP = 6
# A young run may end early (`quiet`) only after this many deep steps saw nothing (at level auto,
# steps 1, 3 and 7: while nothing was seen, each young deep step comes twice as far on as the last).
QUIET_CHECKS = 3
# Level auto's young run tags (creation sites, saved tensors) in this many deep steps, then walks
# only while nothing was seen: tagging costs a deep step more than its walk, and a quiet run's
# survivors show in the first one's cohort (a step's tensors count once two steps old; anything
# seen surviving or growing turns tagging back on).
YOUNG_TAGGED = 1
# In the auto level's windows, every other step is deep (the densest the survivor check allows:
# a tensor counts as surviving once it is two steps old).
WINDOW_GAP = 2


class _NoMode:
    """Stands for the tagging on a deep step that only walks."""


class TensorProbe(Probe):
    name = "tensors"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        self.ctx = ctx
        self.budget = float(ctx.options.get("deep_budget", 0.10))
        self.start_params = StartParams(ctx.optimizer_ref())  # without a model: the optimizer's now are its
        self.traces_at_start = len(traced_functions())  # the compilation unit's earlier traces: not the loop's
        self.modules_at_start = len(sys.modules)  # those imported later are walked (process_roots.py)
        self.ages = Ages()
        self.thread_held = ThreadHeld()  # what other threads make and keep (thread_held.py)
        self.outside = OutsideHeld()  # models kept from outside Python's view (outside_held.py)
        self.births: dict[int, tuple[Any, int, str]] = {}  # id -> (weakref, step, site)
        self.saved: list[tuple] = []  # (weakref to the box, step, storage ptr, bytes, site)
        self.view_boxes: list[Any] = []  # the weakrefs of `saved` whose box holds a saved view (Box.of)
        self.saved_tagged: dict[int, list[int]] = {}
        self.n_tags = 0
        self._mode: _NoMode | Tagging | None = None
        self._thread = threading.get_ident()  # the only thread tagged (see step_begin)
        self._deep_step: int | None = None
        self.plain: float | None = None
        self.prev_roots: dict = {}  # per holder, where its graphs started at the last deep step
        self.last_cost = 0.0
        self.next_deep: float = 1
        self.window: bool | None = None  # the auto level's window: None at a fixed level
        self.referrer_lookups = 0
        self.named_sites: dict[str, str] = {}
        self.site_holders: dict[str, str] = {}  # site -> the holder a walk last named for its survivors
        self.checks = 0  # deep steps sampled (the final check aside)
        self.seen = False  # a tensor survived its step, a graph its backward, or tensors' holder grew
        self.data_bps = 0.0  # the most plain-data bytes a step a holder gained from one walk to the next
        self.sizes: dict[str, tuple] = {}  # per holder, what the last walk found it holding
        self.sized_at: int | None = None  # the step of that walk
        self.code_bounds: dict[str, int] = {}  # per holder, the bound the user's code trims it to (0: none)
        self.frames: list[tuple[int, Any]] = []  # the user's frames (id, code) at the last deep step
        self.loop_frame: tuple[int, Any] | None = None  # the innermost one two deep steps in a row saw
        # Under torch.compile a mode or saved-tensor hook would break graphs or force recompiles:
        # only the reference walk runs then.
        self.tagging = not is_compiled(ctx.model_ref())
        if not self.tagging:
            why = "the model is compiled: no creation sites or saved-tensor tracking"
            ctx.emit(RecordType.EVENT, Event("probe_limited", {"probe": self.name, "reason": why}).to_dict())
        return {"deep_budget": self.budget}

    # ------------------------------------------------------------ tagging
    def _tag(self, out) -> None:
        if isinstance(out, torch.Tensor):
            self._tag_one(out)
        elif isinstance(out, (tuple, list)):
            for o in out[:8]:
                if isinstance(o, torch.Tensor):
                    self._tag_one(o)

    def _tag_one(self, t: torch.Tensor) -> None:
        if isinstance(t, torch.nn.Parameter):
            return
        i = id(t)
        entry = self.births.get(i)
        if entry is not None and entry[0]() is t:
            return
        site = user_site(4)  # frames: user_site, _tag_one, _tag, __torch_function__, the op's caller
        if site is None:  # made by memleak or the optimizer, not by the user's code
            return
        assert self._deep_step is not None  # tagging runs only on a deep step
        self.births[i] = (weakref.ref(t), self._deep_step, site)
        self.n_tags += 1

    def _pack(self, t: torch.Tensor):
        # The graph keeps what pack returns for as long as it keeps the saved tensor: a small
        # box, weakly referenced here, dies exactly when the graph lets go. It holds what autograd
        # would: a leaf (no grad_fn: a parameter, an input, a view made under no_grad) itself, with
        # all it references (a no-grad view of a custom Function's output references that output
        # and so its graph: the cycle of pytorch#94990, a leak the user must see); any other
        # tensor as a detached alias (same storage, same version counter), since holding it
        # itself would hold an output's grad_fn from inside its own graph, a cycle autograd avoids.
        try:
            box = Box(t if t.is_leaf else t.detach(), t._version, saved_view_of(t))
        except Exception:  # a tensor type without detach or a version: hand it back untouched
            return t
        try:
            if len(self.saved) < MAX_TAGS:
                assert self._deep_step is not None  # the hooks run only on a deep step
                ptr, nb = tensor_nbytes(t)
                site = user_site(3)  # frames: user_site, _pack, Tagging.pack, the op's caller
                self.saved.append((weakref.ref(box), self._deep_step, ptr, nb, site or "?"))
                if box.of:  # rare: kept apart, so that a check need not read every saved box
                    self.view_boxes.append(self.saved[-1][0])
                acc = self.saved_tagged.setdefault(self._deep_step, [0, 0])
                acc[0] += 1
                acc[1] += nb
        except Exception:
            pass
        return box

    def step_begin(self, step: int) -> None:
        if step >= self.next_deep and self._mode is None:
            if self.ctx.compiled_step():  # the mode and hooks would be traced into the compiled step
                self._give_up("the training step is compiled whole (optimizer.step() inside torch.compile)")
            self._deep_step = step
            self.n_tags = 0
            sweep()  # our own modes a step ended elsewhere left inert in this thread
            # Tag only in the thread that started the tracker: torch's modes and hooks are per
            # thread, and that one is sure to come back (at close) to take them off (tagging.py).
            # A mode or saved-tensor hook of the user's own still open here (the step ends inside
            # their `with`) would be popped in place of ours when it closes: walk only then too.
            if not self.tagging or threading.get_ident() != self._thread or not stacks_empty() or self._quiet_young():
                self._mode = _NoMode()
                return
            self._mode = Tagging(self)

    def _quiet_young(self) -> bool:
        """Level auto's young run, past its tagged deep steps, with nothing seen so far (`YOUNG_TAGGED`)."""
        return self.ctx.level == Level.AUTO and self.window is None and self.checks >= YOUNG_TAGGED and not self.seen

    def in_optimizer(self, on: bool) -> None:
        mode = self._mode
        if isinstance(mode, Tagging):
            try:  # inside the user's optimizer.step(): whatever happens, the step goes on
                mode.pause() if on else mode.resume()
            except Exception as e:
                self._give_up(f"the creation-site mode could not step aside for the optimizer ({e})")

    def set_detail(self, step: int, on: bool) -> None:
        self.window = on
        self.next_deep = max(step, 1) if on else math.inf  # step 0 runs first-use set-up: not a sample

    def finish(self, step: int) -> None:
        """Level auto: one last survivor check when the run ends, if no window ended it: what was
        seen surviving is looked at once more (a bounded buffer has let it go by then, a leak still
        holds it); a site whose survivors no root reaches keeps the holder the walks in the loop
        named. The loop's frames may be gone by now: a holders record is written only while the
        innermost frame that outlived a step (the loop's, seen by the last two deep steps) is still
        on the stack, so the walk reaches what the loop's variables hold (the last sample of a
        holder kept every few steps, which the windows may have sampled only once)."""
        if self.window is None or self._mode is not None or (self._deep_step or 0) >= step - 1:
            return
        with torch._C.DisableTorchFunction():
            self._deep_sample(step, final=True)

    def check(self, step: int) -> None:
        """Level auto's check: the reference walk alone at the end of `step` (no tagging in the step,
        which costs several times the walk): each holder's count, and what earlier deep steps saw
        surviving looked at again. A holder filled since the last walk, long before, is new to it."""
        if self._mode is not None or self.window:
            return  # a deep step or a window has it already
        with torch._C.DisableTorchFunction():
            self._deep_sample(step, check=True)

    def quiet(self, min_data_bps: float) -> bool:
        """A few deep steps, and nothing surviving or growing in any of them (plain data gaining
        less than `min_data_bps` a step aside)."""
        return self.checks >= QUIET_CHECKS and not self.seen and self.data_bps < min_data_bps

    def _give_up(self, why: str) -> None:
        if self.tagging:
            self.tagging = False
            self.ctx.emit(RecordType.EVENT, Event("probe_limited", {"probe": self.name, "reason": why}).to_dict())

    def _end_tagging(self) -> None:
        mode, self._mode = self._mode, None
        if isinstance(mode, Tagging):
            why = mode.remove()
            if why is not None:
                self._give_up(why)

    # ------------------------------------------------------------ sampling
    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        if self._mode is None:
            # a plain step: the yardstick for what tagging costs, and for the budget
            self.plain = step_seconds if self.plain is None else 0.8 * self.plain + 0.2 * step_seconds
            return {}
        self._end_tagging()
        t0 = time.perf_counter()
        self.lookup_seconds: float = 0.0
        try:
            self._deep_sample(step)
        finally:
            plain = self.plain or step_seconds
            # what this deep step cost: the slower step while tagging and the walk (a one-off
            # referrer lookup does not set the pace)
            lookups = self.lookup_seconds + self.outside.seconds  # one-offs: they do not set the pace
            cost = max(0.0, step_seconds - plain) + time.perf_counter() - t0 - lookups
            self.last_cost = cost
            gap = max(2, math.ceil(cost / max(plain * self.budget, 1e-9)))
            young = young_gap(step, cost, doubling=self._quiet_young())  # nothing seen yet: 1, 3, 7
            self.next_deep = step + (WINDOW_GAP if self.window else young or min(gap, MAX_GAP))
        return {"deep_seconds": round(time.perf_counter() - t0, 6)}

    def _deep_sample(self, step: int, final: bool = False, check: bool = False) -> None:
        model = self.ctx.model_ref()
        opt = self.ctx.optimizer_ref()
        modules = model_modules(model)  # one pass over the tree, for the owned tensors and the walk
        exclude, ptrs = excluded_ids(model, opt, self.start_params, modules)
        frames = user_frames()
        here = [(id(f), f.f_code) for f in frames]
        if not final:
            self.loop_frame = next((f for f in here if f in self.frames), None)
            self.frames = here
        t0 = time.perf_counter()
        # level auto's growth windows only: a scan's passes over every object cost a test runner's
        # worker seconds, and a fixed level has no sign of growth to wait for
        self.outside.growing = bool(self.window)
        # prev_roots: a holder whose graph is built on what it held at the last deep step carries
        # the chain from step to step (graphs.py)
        walk = walk_roots(
            step=step,
            model=model,
            optimizer=opt,
            ages=self.ages,
            exclude=exclude,
            frames=frames,
            device_type=self.ctx.device.type,
            prev_roots=self.prev_roots,
            traces_since=self.traces_at_start,
            modules_since=self.modules_at_start,
            modules=modules,
            thread_held=self.thread_held,
            outside=self.outside,
        )
        del frames
        walk_seconds = time.perf_counter() - t0
        self.ages.prune()
        if final:
            if self.loop_frame is not None and self.loop_frame in here:
                rec = holders_record(
                    walk, step, walk_seconds, before=self.sizes, code_bounds=self.code_bounds, new_grew=False
                )
                self.ctx.emit(RecordType.HOLDERS, rec.to_dict())
            named = {**self.site_holders, **self.named_sites}
            self._check_births(step, exclude, ptrs, walk.tensor_holder, named, final=True)
            self._check_saved(step, ptrs)
            return
        self.prev_roots = walk.roots
        sizes = holder_sizes(walk.holders, walk.buffers, len(exclude))
        # a window's (a check's) walk comes long after the last: a holder filled since is new to it
        grown, data = compare_sizes(self.sizes, sizes, new=(check or bool(self.window)) and self.sized_at is not None)
        self.seen = self.seen or grown
        if self.sized_at is not None:
            self.data_bps = max(self.data_bps, data / max(1, step - self.sized_at))
        before, self.sizes, self.sized_at = self.sizes, sizes, step
        self.checks += 1
        rec = holders_record(walk, step, walk_seconds, before=before, code_bounds=self.code_bounds)
        self.ctx.emit(RecordType.HOLDERS, rec.to_dict())
        self._check_births(step, exclude, ptrs, walk.tensor_holder, self.named_sites)
        self._check_saved(step, ptrs)

    def _check_births(
        self,
        step: int,
        exclude: set[int],
        ptrs: set[int],
        tensor_holder: dict[int, str],
        named: dict[str, str],
        final: bool = False,
    ) -> None:
        found = group_births(self.births, step, exclude, ptrs, tensor_holder, named, self._saved_views())
        for _, site, holder in found.groups:
            if holder:
                self.site_holders[site] = holder
        for i in found.dead:
            del self.births[i]
        # name what the root walk did not reach, for sites that survive from two deep steps or more
        if found.unnamed and self.referrer_lookups < MAX_REFERRER_LOOKUPS:
            self._name_by_referrers(found)
        cohorts = birth_cohorts(found.groups, found.cycles)
        self.seen = self.seen or bool(cohorts)
        self._drop_old_births()
        # gen-2 collections so far: survivors that die all at once when one runs were held by a cycle
        rec = BirthsRecord(step=step, cohorts=tuple(cohorts[:200]), gc2=gc.get_stats()[2]["collections"], final=final)
        self.ctx.emit(RecordType.BIRTHS, rec.to_dict())

    def _name_by_referrers(self, found: Survivors) -> None:
        """Look up, by gc referrers (slow: a few per run), who holds the survivors of sites no root
        named, and keep the name for the site."""
        cohorts_by_site = cohorts_per_site(found.groups)
        for site, ref in found.unnamed.items():
            if len(cohorts_by_site[site]) >= 2 and self.referrer_lookups < MAX_REFERRER_LOOKUPS:
                self.referrer_lookups += 1
                t0 = time.perf_counter()
                name = name_by_referrers(ref)
                self.lookup_seconds += time.perf_counter() - t0
                if name:
                    self.named_sites[site] = name
                    name_site(found.groups, site, name)

    def _drop_old_births(self) -> None:
        """Keep the tags of the newest cohorts only."""
        borns = sorted({e[1] for e in self.births.values() if e[1] is not None})
        if len(borns) > MAX_COHORTS:
            cut = borns[-MAX_COHORTS]
            for i in [i for i, e in self.births.items() if e[1] is not None and e[1] < cut]:
                del self.births[i]

    def _saved_views(self) -> dict[int, str]:
        """id of a custom Function's output -> the Function, for the outputs of which a view saved on
        a deep step is still held by the graph (the box keeps the view, the view its base)."""
        self.view_boxes = [ref for ref in self.view_boxes if ref() is not None]
        return {id(box.t._base): box.of for ref in self.view_boxes if (box := ref()) is not None}

    def _check_saved(self, step: int, ptrs: set[int]) -> None:
        self.saved, cohorts = saved_cohorts(self.saved, step, ptrs)
        self.seen = self.seen or bool(cohorts)
        tagged = {str(k): list(v) for k, v in self.saved_tagged.items()}
        self.ctx.emit(RecordType.SAVED, SavedRecord(step=step, cohorts=tuple(cohorts), tagged=tagged).to_dict())
        if len(self.saved_tagged) > MAX_COHORTS:
            for k in sorted(self.saved_tagged)[:-MAX_COHORTS]:
                del self.saved_tagged[k]

    def stop(self) -> None:
        self._end_tagging()
        sweep()
        self.prev_roots = {}
        self.births = {}
        self.saved = []
        self.view_boxes = []
        if hasattr(self, "ages"):
            self.ages.clear()
