"""The records memleak writes and reads, and the findings it reports.

Plain frozen dataclasses and str Enums only: this module imports nothing from
torch, pandas or the rest of memleak, so every layer can use it. The probes'
detail records (holders, births, saved tensors, modules, events) are declared
field by field in `memleak.records`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

#: Per-worker PSS and private-memory columns are named WORKER_PSS.format(i) and
#: WORKER_PRIVATE.format(i), their RSS WORKER_RSS.format(i) (schema.STEP_COLUMNS declares the patterns).
WORKER_PSS = "worker{}_pss_bytes"
WORKER_PRIVATE = "worker{}_private_bytes"
WORKER_RSS = "worker{}_rss_bytes"
#: Version of the run-file format. A reader refuses files of another version.
SCHEMA_VERSION = 1
#: The first record of every run file has this type.
HEADER = "header"
#: A record with this type ends one iteration (forward-filled: absent keys kept their last value).
STEP = "step"

# Which column shows memory growth best, in order of preference. On an
# accelerator its allocator counts every tensor. Without one, the C heap's
# in-use bytes (glibc mallinfo2: CPU tensor storages are malloc'ed) are exact and
# cheap every step; the live-tensor census is exact but sampled; RSS is the last
# resort (it never shrinks after a free and counts Python objects too).
MEMORY_COLUMNS = ("allocated_bytes", "heap_bytes", "tensor_bytes", "rss_bytes")
HOST_COLUMNS = ("heap_bytes", "rss_bytes")
#: memleak's own bytes on the C heap (its bookkeeping, what it imports mid-run): taken off the host
#: series wherever they are judged or drawn.
OWN_COLUMN = "memleak_bytes"
#: Why a run with no iteration has no verdict, and what marks one (the report, the tracker's warning).
NO_STEPS = (
    "no iteration was recorded: call tracker.step() at the end of each iteration, or give memleak.track "
    "the model (each backward pass through its output, or each call, ends one) or optimizer= (each step does)"
)
#: What a probe's sample returns while tracemalloc traces (probes/alloc_sites.py): (whether the
#: step's host reads saw its tables, the bytes of them the sample itself started or freed, whether
#: tracing stopped since). The tracker empties those reads, keeps the bytes out of its
#: bookkeeping's own, counts the rise tracing left as memleak's (heap_reads), and writes none.
TRACING = "_tracing"
#: Something that happened once: an OOM, a warning, a snapshot dump, a probe that was skipped.
EVENT = "event"


class StrEnum(str, Enum):
    """A str Enum that prints, formats and serialises as its value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class RecordType(StrEnum):
    """The type of a run-file record (its ``"type"`` key). Besides the header, steps and events,
    the culprit probes write detail records on their sampled steps; `Run` gives each by name, as
    the frozen dataclasses of `memleak.records` that declare their fields."""

    HEADER = "header"
    STEP = "step"
    EVENT = "event"  # records.Event: something that happened once
    HOLDERS = "holders"  # records.HoldersRecord: the reference walk (probes/holders.py)
    BIRTHS = "births"  # records.BirthsRecord: surviving tensors by creation site (probes/tensors.py)
    SAVED = "saved"  # records.SavedRecord: tensors saved for backward that survive their step
    MODULES = "modules"  # records.ModulesRecord: per-module memory deltas (probes/modules.py)


class Kind(StrEnum):
    """What a suspect is. str-valued so it prints and serialises as its name."""

    RETAINED_GRAPH = "retained_graph"
    CACHED_TENSOR = "cached_tensor"
    SURVIVING_TENSORS = "surviving_tensors"
    # objects a holder keeps that are no tensors: plain Python data (numbers, strings, lists, dicts),
    # functions torch.jit.trace compiled (probes/jit_traces.py)
    PYTHON_OBJECTS = "python_objects"
    FRAGMENTATION = "fragmentation"
    LINEAR_GROWTH = "linear_growth"
    HOST_GROWTH = "host_growth"
    NON_PYTORCH_MEMORY = "non_pytorch_memory"
    # a profiler left recording: it keeps an event for every op in host memory (detect/profilers.py)
    PROFILER = "profiler"
    # findings that name no suspect (Finding.note): what a person should know about the run
    MEMORY_DROP = "memory_drop"  # memory fell suddenly, and why
    NO_GRAD = "no_grad"  # the loop ran with gradients disabled (inference, evaluation)


class Verdict(StrEnum):
    LEAK = "leak"
    CLEAN = "clean"
    INCONCLUSIVE = "inconclusive"


class Level(StrEnum):
    """How much a tracker records (see README: Levels). counters, modules and full each add to
    the one before; auto records counters every step and full detail in windows."""

    COUNTERS = "counters"
    AUTO = "auto"
    MODULES = "modules"
    FULL = "full"


#: Every level, cheapest first: the choices a user may pass as `level=`.
LEVELS = tuple(level.value for level in Level)
#: The level of `track`, `watch`, `memleak run`, the pytest plugin and the callbacks.
DEFAULT_LEVEL = Level.AUTO.value

#: The event the auto level writes each time it turns full detail on or off: ``{"event":
#: "detail", "step": the first step at the new level, "level": "full" | "counters", "reason"}``
#: (docs/run-format.md); `Run.detail_spans` reads them back.
DETAIL_EVENT = "detail"
#: The event of each of the auto level's checks (the reference walk at the end of a step, between
#: windows): ``{"event": "check", "step": the step}``; `Run.check_steps` reads them back.
CHECK_EVENT = "check"
#: The event of the garbage collection when a run ends with memory rising (recorder/live.py), what it freed.
GC_AT_END = "gc_at_end"
#: The event of a tracemalloc window: the user's lines whose blocks it saw stay alive (probes/alloc_sites.py).
ALLOC_SITES_EVENT = "alloc_sites"


class DetailReason(StrEnum):
    """Why the auto level turned full detail on (or, for WINDOW_END and QUIET, off)."""

    START = "start"  # the first steps of every run, recorded as at level full
    GROWTH = "growth"  # the growth screen saw memory start to rise
    SAMPLE = "sample"  # a sampled window, paid for by the auto level's time budget
    WINDOW_END = "window_end"  # the window took its samples: back to counters
    QUIET = "quiet"  # the young steps saw nothing surviving or growing: back to counters early
    RESTART = "restart"  # the iterations' boundary changed from a model call: young steps again


class Boundary(StrEnum):
    """What ends one iteration (the ``boundary`` event of a run), strongest first: a stronger one
    seen takes over from a weaker one (see memleak/recorder/boundaries.py)."""

    CALL = "call"  # tracker.step(), or a watched function returning
    OPTIMIZER = "optimizer"  # optimizer.step() (or its gradients reset when a GradScaler skipped it)
    BACKWARD = "backward"  # no optimizer step seen: a backward pass through the model's output
    FORWARD = "forward"  # no optimizer step nor backward pass seen: a call of the model


class Shape(StrEnum):
    """The shape of a memory series after its warm-up (see memleak.detect.growth)."""

    LINEAR = "linear"
    PLATEAU = "plateau"
    SAWTOOTH = "sawtooth"
    BOUNDED = "bounded"
    DROP = "drop"
    FLAT = "flat"
    TOO_SHORT = "too_short"
    NO_DATA = "no_data"


class DivergenceKind(StrEnum):
    """How one rank of a distributed run differs from the others."""

    LEAKS_ALONE = "leaks_alone"
    HOLDS_MORE = "holds_more"


@dataclass(frozen=True)
class Divergence:
    """A rank that behaves unlike the others: `bytes` is its growth per step (leaks_alone)
    or the bytes it holds above the median of the ranks (holds_more)."""

    rank: int
    kind: DivergenceKind
    bytes: float
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values."""
        return {"rank": self.rank, "kind": self.kind.value, "bytes": self.bytes, "evidence": self.evidence}


@dataclass(frozen=True)
class Finding:
    """What one detector concluded about one phenomenon in one Run.

    `leak` says whether this finding alone shows memory that keeps growing
    (it makes the verdict "leak"); fragmentation or a large CUDA context are
    findings worth reporting that are not leaks. `note` marks a finding that
    names no suspect (a drop explained, a loop run without gradients, worker
    growth within the host's memory): reports list it under "findings", and
    `suspects.rank` leaves it out. `data` carries numbers for plots and
    machine-readable output (JSON-able values only).
    """

    detector: str
    kind: Kind
    location: str
    bytes_per_step: float
    total_bytes: float
    confidence: float
    evidence: tuple[str, ...]
    fix: str
    leak: bool = True
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    note: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, as findings.json holds them."""
        d = asdict(self)
        d["kind"] = self.kind.value
        d["evidence"] = list(self.evidence)
        return d


@dataclass(frozen=True)
class Suspect:
    """One likely cause, with everything found about it. Most likely first in Report.suspects."""

    kind: Kind
    location: str
    bytes_per_step: float
    total_bytes: float
    confidence: float
    evidence: tuple[str, ...]
    fix: str
    leak: bool = True
    detectors: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, as findings.json holds them."""
        d = asdict(self)
        d["kind"] = self.kind.value
        d["evidence"] = list(self.evidence)
        d["detectors"] = list(self.detectors)
        return d


def finding_data(f: Finding) -> dict[str, Any]:
    """`f.data`, or an empty dict where a finding was made without one."""
    return f.data if isinstance(f.data, dict) else {}


# Column names of Run.steps. Probes write these keys into step records; detectors read them.
STEP_COLUMNS = {
    "step": "iteration index, from 0",
    "time": "seconds since the run started, at the end of the step",
    "duration": "seconds the step took",
    # accelerator caching allocator (torch.cuda / torch.accelerator memory_stats)
    "allocated_bytes": "bytes in live tensors, as the allocator counts them (rounded block sizes)",
    "reserved_bytes": "bytes the caching allocator holds from the device",
    "active_bytes": "bytes in blocks in use, including those freed but awaiting stream sync",
    "inactive_split_bytes": "free bytes inside split blocks that only same-size requests can reuse",
    "requested_bytes": "bytes the program asked for, before rounding",
    "allocated_peak_bytes": "peak of allocated_bytes since the process started (never reset by memleak)",
    "reserved_peak_bytes": "peak of reserved_bytes since the process started",
    "requested_peak_bytes": "peak of requested_bytes since the process started",
    "num_alloc_retries": "cumulative cudaMalloc retries after freeing the cache",
    "num_ooms": "cumulative out-of-memory errors the allocator raised",
    "device_total_bytes": "device memory in all",
    "device_free_bytes": "device memory free, as the driver reports it",
    # NVML
    "nvml_process_bytes": "device memory this process uses, per NVML (includes the CUDA context)",
    "nvml_device_used_bytes": "device memory used by every process, per NVML",
    # device-agnostic live-tensor census
    "tensor_bytes": "bytes of live tensor storages on the tracked device (census)",
    "tensor_count": "number of live tensor storages on the tracked device (census)",
    # census rows are sampled (see probes.census): NaN on steps without one
    # host
    "heap_bytes": "bytes in use on the C heap (glibc mallinfo2); CPU tensor storages live here",
    "rss_bytes": "resident set size of this process",
    # DataLoader workers (probes/workers.py): PSS and private memory read from /proc/PID/smaps_rollup
    # on a time budget, null on steps without a read
    "workers": "DataLoader worker processes alive at the end of the step",
    "worker_pss_bytes": "proportional set size of all DataLoader workers together (sampled)",
    "worker{i}_pss_bytes": "proportional set size of one worker (one column per worker slot, i = 0, 1, ...; "
    "a slot keeps its DataLoader and worker index across epochs, see the dataloader_workers event)",
    "worker_private_bytes": "private memory of all DataLoader workers together (sampled)",
    "worker{i}_private_bytes": "private memory of one worker (Private_Clean + Private_Dirty: pages no other "
    "process maps, such as the pages copy-on-read copied into it), one column per worker slot like the PSS",
    "worker{i}_rss_bytes": "resident set size of one worker, from /proc/PID/statm (cheap: read every step at "
    "first, then every 4th); it grows when the worker allocates memory of its own, not by copy-on-read",
    # pinned host memory (CUDA host allocator, torch.cuda.memory.host_memory_stats)
    "pinned_bytes": "bytes of pinned host blocks the CUDA host allocator owns (in use and cached)",
    "pinned_active_bytes": "bytes of pinned host blocks handed out and not yet reusable",
    # Python and autograd state
    "gc_collections": "full (generation 2) collections of Python's cyclic garbage collector so far",
    "gc_collected": "objects those full collections freed so far",
    "grad_enabled": "1 when gradients were enabled at the end of the step, 0 under no_grad or inference_mode",
    "profiler_on": "1 when a profiler (torch.profiler, torch.autograd.profiler) was recording at the end of the step",
    "autocast_cached": "1 when a torch.autocast block with its cast cache on was open at the end of the step",
    "atexit_callbacks": "how many callbacks atexit keeps at the end of the step (-1: not known)",
    "optimizer_steps": "optimizer.step() calls so far (when an optimizer was given)",
    "grad_scale": "the loss scale of AMP's GradScaler (found among the variables where tracking started); "
    "it falls when the scaler skipped a step for inf or NaN gradients",
    # memleak itself
    "memleak_bytes": "bytes memleak's own bookkeeping holds on the C heap, less what its own garbage "
    "collections freed (its net effect, taken off the host series)",
}


def finding_from_dict(d: dict[str, Any]) -> Finding:
    d = dict(d)
    d["kind"] = Kind(d["kind"])
    d["evidence"] = tuple(d.get("evidence", ()))
    return Finding(**d)


def to_jsonable(o: Any) -> Any:
    """`o` as plain JSON values: numpy scalars unwrapped, NaN and inf as None, Enums by value."""
    if isinstance(o, dict):
        return {str(k): to_jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [to_jsonable(v) for v in o]
    if hasattr(o, "item") and not isinstance(o, (str, bytes)):  # numpy scalars
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, Enum):
        return o.value
    if o is None or isinstance(o, (str, int, float, bool)):
        return o
    return str(o)
