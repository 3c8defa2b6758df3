"""Per-module memory attribution and module-attribute scans.

On sampled ("detail") steps, forward pre/post hooks on every submodule count its calls. On every
`MEASURE_EVERY`-th detail step they also read a memory counter (on CUDA the allocator's allocated
bytes, read from its nested statistics: ``torch.cuda.memory_allocated`` flattens and sorts all of
them on each call; the glibc heap counter on CPU, 3 to 30 microseconds as the heap fragments) and
add each forward's delta to its module: the activation memory that forward leaves allocated. A
forward repeats itself, so a few steps measure it: the reads (four per module call, forward and
backward) were about half of what the hooks cost a detail step on CPU, while what the detail
steps look for, outputs kept alive from step to step, needs every one of them. A step whose reads
would cost more than a few plain steps (a heap fragmented by a leak: `budget.reads_affordable`)
reads nothing. The hooks are installed for the detail
step only, and the steps between cost nothing. On detail steps the probe also

- keeps weak references to each module's outputs, to count the bytes each
  module's forward leaves alive at step end, and those still alive two or
  more steps later (an output somebody keeps);
- on the measured ones, hooks the autograd nodes at each module's outputs and inputs to measure
  the memory its backward allocates (gradients);
- sums the memory by category, as torch's ``mem_tracker`` names them:
  parameter, buffer, gradient, optimizer state, activation, other.

At level "modules" it also scans module attributes (tensors and tensor
containers that are not parameters or buffers, hook closures) with the same
walk the TensorProbe uses at level "full", and emits the same ``holders`` records.

Record ``modules`` (`memleak.records.ModulesRecord`; one per detail step, aggregating the steps since the last):
``{"step", "steps", "counter", "categories": {...}, "modules": [[path, calls, fwd_bytes, bwd_bytes, left_bytes]],
"alive": [[path, born, count, bytes]]}``: fwd/bwd bytes are per step, summed over calls (``steps`` is 1:
the detail step measured); ``counter`` is empty on a detail step that read none (its fwd/bwd bytes are 0).
"""

from __future__ import annotations

import math
import time
import weakref
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as module_hooks

from ..records import Event, ModuleOutputs, ModuleRow, ModulesRecord
from ..schema import Level, RecordType
from . import Probe, ProbeContext, Unavailable, identity
from .allocator import nested_value
from .budget import reads_affordable, young_gap
from .categories import memory_categories
from .holders import holders_record, walk_roots
from .identity import Ages, excluded_ids, is_compiled, tensor_nbytes, user_path
from .registry import Registry

MAX_OUTPUTS = 4  # tensors kept (weakly) per module call on detail steps
MAX_COHORTS = 8
# Detail steps (outputs, backward hooks, categories, the attribute scan) come every MIN_GAP..MAX_GAP steps.
MIN_GAP = 8
MAX_GAP = 12
# In the auto level's windows, every other step is a detail step (outputs two steps old are compared).
WINDOW_GAP = 2
# The forward and backward bytes are read on the first detail step and every MEASURE_EVERY-th after
# (at level auto, of its windows' detail steps).
MEASURE_EVERY = 4


def cuda_allocated(index: int | None) -> int:
    """The CUDA allocator's allocated bytes (0 before CUDA starts), without flattening its statistics."""
    return int(nested_value(torch.cuda.memory_stats_as_nested_dict(index), "allocated_bytes.all.current") or 0)


def memory_counter(device: torch.device) -> tuple[Callable[[], int] | None, str]:
    if device.type == "cuda":
        idx = device.index
        return (lambda: cuda_allocated(idx)), "cuda_allocated"
    if device.type == "cpu":
        from .host import heap_counter

        heap = heap_counter()
        return (heap, "heap") if heap is not None else (None, "none")
    fn = lambda: torch.accelerator.memory_allocated(device.index)
    try:
        fn()  # a counter that fails would fail inside the user's forward: test it here
    except Exception:
        return None, "none"
    return fn, "accelerator_allocated"


def _zero() -> int:
    return 0


def _tensors(out, limit: int = MAX_OUTPUTS):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [o for o in out[:limit] if isinstance(o, torch.Tensor)]
    if isinstance(out, dict):
        return [o for o in list(out.values())[:limit] if isinstance(o, torch.Tensor)]
    return []


class ModuleProbe(Probe):
    name = "modules"

    def start(self, ctx: ProbeContext) -> dict[str, Any]:
        model = ctx.model_ref()
        if model is None:
            raise Unavailable("no model was given: module attribution needs memleak.track(model, ...)")
        self.ctx = ctx
        self.counter, self.counter_name = memory_counter(ctx.device)
        self.count = self.counter or _zero
        self.handles: list = []
        self.node_handles: list = []
        self.paths: list[str] = []
        self.index: dict[int, int] = {}
        by_path: dict[str, int] = {}
        for name, m in model.named_modules():
            path = user_path(name) or "<root>"  # a compiled wrapper and its module share one row
            i = by_path.setdefault(path, len(self.paths))
            if i == len(self.paths):
                self.paths.append(path)
            self.index[id(m)] = i
        n = len(self.paths)
        # one backward hook of each kind per module row, made once (not one closure per call)
        self.bw_start = [self._bw_start_hook(i) for i in range(n)]
        self.bw_end = [self._bw_end_hook(i) for i in range(n)]
        self.calls = [0] * n
        self.last_calls, self.unaffordable = 0, False  # module calls of the last detail step; reads too dear
        self.fwd = [0] * n
        self.bwd = [0] * n
        self.stack: list[int] = []
        self.bw_open: dict[int, int] = {}
        self.detail = False
        self.detail_step: int | None = None
        self.input_shape = ""  # of the model's first input tensor on the detail step ("16x3x32x32")
        self.details = 0  # detail steps so far that may read the counter
        self.measure = False  # this detail step reads the counter
        self.outputs: list[tuple[Any, int, int, int]] = []  # (weakref, module index, step, bytes)
        self.next_detail: float = 1
        self.window: bool | None = None  # the auto level's window: None at a fixed level
        self.budget = float(ctx.options.get("modules_budget", 0.03))
        self.plain: float | None = None  # the time of a step without hooks (a moving average)
        self.scan = ctx.level == "modules"
        self.ages = Ages()
        self.registry = Registry()
        self.registry.rows(model)  # each module's registered entries as they are before the loop
        self.hooked = True
        if is_compiled(model):  # Python hooks in a compiled forward break its graphs
            self._limit("the model is compiled")
        return {"module_counter": self.counter_name, "modules": n, "module_hooks": self.hooked}

    def _limit(self, why: str) -> None:
        """No module hooks from now on: they would run inside compiled code (extra frames, a torch
        warning about global hooks, recompiles); the model is seen from outside it, at step
        boundaries, by its original tree."""
        self.hooked = False
        self._remove_hooks()
        why += (
            ": no per-forward module deltas; categories and module-attribute scans at step boundaries,"
            " named by the original module tree"
        )
        self.ctx.emit(RecordType.EVENT, Event("probe_limited", {"probe": self.name, "reason": why}).to_dict())

    # ------------------------------------------------------------ hooks
    # Each hook first asks whether dynamo traces it (a model called from a compiled function):
    # dynamo folds the answer, so the compiled graph gets nothing of memleak's.
    def _pre(self, module, inputs):
        if torch.compiler.is_compiling():
            return
        i = self.index.get(id(module))
        if i is None:  # a module of another model, or a copy of one of ours
            return
        if not self.measure:  # the pre-hook is in only while measuring (a detail step)
            return
        self.stack.append(self.count())
        try:
            for t in _tensors(inputs, 2):
                gf = t.grad_fn
                if gf is not None:
                    self.node_handles.append(gf.register_prehook(self.bw_end[i]))
                    break
        except Exception:  # a hook must never break the user's forward
            pass

    def _post(self, module, inputs, output):
        if torch.compiler.is_compiling():
            return
        i = self.index.get(id(module))
        if i is None:
            return
        if self.measure:
            try:
                start = self.stack.pop()
            except IndexError:  # a forward that began before the hooks went in (in any thread): not measured
                return
            self.fwd[i] += self.count() - start
        self.calls[i] += 1
        if self.detail:
            try:
                if i == 0 and not self.input_shape:  # the model's first call: its input's shape
                    first = next(iter(_tensors(inputs, 2)), None)
                    self.input_shape = "x".join(map(str, first.shape)) if first is not None else ""
                for t in _tensors(output):
                    _, nb = tensor_nbytes(t)
                    self.outputs.append((weakref.ref(t), i, self.detail_step, nb))
                if self.measure:  # the backward's bytes are read only on a measured step
                    for t in _tensors(output, 1):
                        gf = t.grad_fn
                        if gf is not None:
                            self.node_handles.append(gf.register_prehook(self.bw_start[i]))
            except Exception:  # a hook must never break the user's forward
                pass

    def _bw_start_hook(self, i: int):
        def hook(grad_outputs):
            if self.counter is not None and not torch.compiler.is_compiling():
                self.bw_open[i] = self.counter()

        return hook

    def _bw_end_hook(self, i: int):
        def hook(grad_outputs):
            if torch.compiler.is_compiling():
                return
            s = self.bw_open.pop(i, None)
            if s is not None and self.counter is not None:
                self.bwd[i] += self.counter() - s

        return hook

    # ------------------------------------------------------------ steps
    def step_begin(self, step: int) -> None:
        if step < self.next_detail:  # most steps (between windows at level auto, all of them)
            return
        self.stack.clear()
        if self.hooked and self.ctx.compiled_step():  # before any hook goes in
            self._limit("the training step is compiled whole (optimizer.step() inside torch.compile)")
        self.detail = True
        self.detail_step = step
        # level auto measures in its windows only: its young steps look for what survives, and
        # the reads (four a module call, each a walk of the C heap on CPU) cost a step's time
        measurable = self.counter is not None and (self.window or self.ctx.level != Level.AUTO)
        self.measure = measurable and self.details % MEASURE_EVERY == 0 and self._affordable()
        self.details += measurable
        if self.hooked and not self.handles:
            # Global hooks, filtered by module identity: nothing is attached to the user's modules,
            # so torch.save(model), pickle and copy.deepcopy see them as they were.
            if self.measure:  # the pre-hook only reads the counter and hooks the backward
                self.handles.append(module_hooks.register_module_forward_pre_hook(self._pre))
            self.handles.append(module_hooks.register_module_forward_hook(self._post))

    def _affordable(self) -> bool:
        """Whether reading the counter around every module call (4 a call, as many as the last
        detail step made) costs what a measured step may (`budget.reads_affordable`); once it does
        not, the run says so, once."""
        ok, cost = reads_affordable(self.count, 4 * (self.last_calls or len(self.paths)), self.plain)
        if not ok and not self.unaffordable:
            self.unaffordable = True
            why = f"reading the {self.counter_name} counter around each module call would cost {cost:.1f} s a step"
            self.ctx.emit(RecordType.EVENT, Event("probe_limited", {"probe": self.name, "reason": why}).to_dict())
        return ok

    def set_detail(self, step: int, on: bool) -> None:
        self.window = on
        self.next_detail = step if on else math.inf

    def sample(self, step: int, step_seconds: float) -> dict[str, Any]:
        if not self.detail:
            # a step without hooks: the yardstick for what the hooks cost inside a detail step
            self.plain = step_seconds if self.plain is None else 0.8 * self.plain + 0.2 * step_seconds
            return {}
        t0 = time.perf_counter()
        self.detail = False
        measured, self.measure = self.measure, False
        self._remove_hooks()
        for h in self.node_handles:
            try:
                h.remove()
            except Exception:
                pass
        self.node_handles.clear()
        self.bw_open.clear()
        with torch._C.DisableTorchFunction():  # the TensorProbe's mode may still be on
            self._emit(step, measured)
        plain = self.plain or step_seconds
        # what this detail step cost: its hooks inside the step (the slower step) and its record
        cost = max(0.0, step_seconds - plain) + time.perf_counter() - t0
        gap = max(MIN_GAP, math.ceil(cost / max(plain * self.budget, 1e-9)))
        young = young_gap(step, cost, doubling=self.ctx.level == Level.AUTO and self.window is None)  # auto: 1, 3, 7
        self.next_detail = step + (WINDOW_GAP if self.window else young or min(gap, MAX_GAP))
        return {}

    def _remove_hooks(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    def _emit(self, step: int, measured: bool) -> None:
        model = self.ctx.model_ref()
        opt = self.ctx.optimizer_ref()
        n = 1  # the hooks measured the detail step only
        left, alive = self._outputs_alive(step)
        rows = [
            ModuleRow(path, self.calls[i], int(self.fwd[i] / n), int(self.bwd[i]), int(left.get(i, 0)))
            for i, path in enumerate(self.paths)
            if self.calls[i] or left.get(i)
        ]
        cats = memory_categories(model, opt, self.counter)
        if self.hooked and measured:  # a compiled forward is not seen: no activation figure rather than a false 0
            cats["activation"] = max(0, int(self.fwd[0] / n)) if self.paths else 0
        kept = [ModuleOutputs(self.paths[i], b, c, nb) for (i, b), (c, nb) in sorted(alive.items())]
        rec = ModulesRecord(
            step=step,
            steps=n,
            counter=self.counter_name if measured else "",
            categories=cats,
            modules=tuple(rows),
            alive=tuple(kept),
            registered=self.registry.rows(model, opt) if model is not None else (),
            input_shape=self.input_shape,
        )
        self.input_shape = ""
        self.ctx.emit(RecordType.MODULES, rec.to_dict())
        self.last_calls = sum(self.calls)
        self.calls = [0] * len(self.paths)
        self.fwd = [0] * len(self.paths)
        self.bwd = [0] * len(self.paths)
        if self.scan and model is not None:
            self._scan_attributes(step, model, opt)

    def _outputs_alive(self, step: int) -> tuple[defaultdict[int, int], defaultdict[tuple[int, int], list[int]]]:
        """Bytes of the outputs each module made this step that are still alive, and [count, bytes]
        per (module, birth step) of those made two or more steps ago; forgets dead outputs and
        all but the newest cohorts."""
        left: defaultdict[int, int] = defaultdict(int)
        alive: defaultdict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])
        keep = []
        for entry in self.outputs:
            ref, i, born, nb = entry
            t = ref()
            if t is None:
                continue
            keep.append(entry)
            if born == step:
                left[i] += nb
            elif step - born >= 2:
                a = alive[(i, born)]
                a[0] += 1
                a[1] += nb
            del t
        borns = sorted({e[2] for e in keep})
        if len(borns) > MAX_COHORTS:
            keep = [e for e in keep if e[2] >= borns[-MAX_COHORTS]]
        self.outputs = keep
        return left, alive

    def _scan_attributes(self, step: int, model, opt) -> None:
        """The module-attribute scan of level "modules": the reference walk over the model tree only."""
        modules = identity.model_modules(model)
        exclude, _ = excluded_ids(model, opt, modules=modules)
        t0 = time.perf_counter()
        walk = walk_roots(
            step=step,
            model=model,
            optimizer=opt,
            ages=self.ages,
            exclude=exclude,
            frames=[],
            budget=3000,
            modules=modules,
        )
        self.ages.prune()
        rec = holders_record(walk, step, time.perf_counter() - t0, scope="model")
        self.ctx.emit(RecordType.HOLDERS, rec.to_dict())

    def stop(self) -> None:
        if hasattr(self, "handles"):
            self._remove_hooks()
        for h in getattr(self, "node_handles", []):
            try:
                h.remove()
            except Exception:
                pass
        self.node_handles = []
        self.outputs = []
        self.detail = False
        if hasattr(self, "ages"):
            self.ages.clear()
        if hasattr(self, "registry"):
            self.registry.clear()
