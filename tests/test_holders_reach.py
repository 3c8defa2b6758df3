"""Holders wherever Python can reach them: closure cells, caller frames, an optimizer's own
attributes, and reference cycles through autograd (probes/reach.py, detect/cycles.py)."""
from __future__ import annotations

import functools
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from memleak.detect import culprits
from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages, excluded_ids
from memleak.probes.reach import cycle_of
from memleak.run import Run
from memleak.schema import Kind


def _walk(frames, model=None, opt=None):
    exclude, _ = excluded_ids(model, opt)
    return walk_roots(step=5, model=model, optimizer=opt, ages=Ages(), exclude=exclude, frames=frames)


def record(fn):
    trace = []

    @functools.wraps(fn)
    def wrapper(*a):
        out = fn(*a)
        trace.append(out)
        return out

    return wrapper


@record
def scaled(x):
    return x * 2


def make_step():
    losses = []

    class State:
        buf = None

    state = State()
    state.buf = [torch.zeros(2)]

    def step(x):
        losses.append(x * 1)
        return state

    return step


def test_closure_cell_of_a_returned_factory_is_named_by_variable_and_owner():
    step_fn = make_step()
    for _ in range(3):
        step_fn(torch.ones(4))
    h = _walk([sys._getframe()]).holders
    name = "losses (closure of make_step.<locals>.step)"
    assert h[name].count == 3 and h[name].kind == "closure"
    assert "make_step()" in h[name].note
    # attributes of an object a closure keeps extend the variable's name, not the function's
    assert h["state.buf (closure of make_step.<locals>.step)"].count == 1
    assert not any(k.startswith("step_fn.") for k in h)


def test_decorator_state_of_a_module_level_function_is_reached():
    scaled(torch.ones(3))
    scaled(torch.ones(3))
    try:
        h = _walk([sys._getframe()]).holders
        st = h["trace (closure of record.<locals>.wrapper)"]
        assert st.kind == "closure" and st.count == 2
    finally:
        _clear_trace()


def _clear_trace():
    for name, cell in zip(scaled.__code__.co_freevars, scaled.__closure__):
        if name == "trace":
            cell.cell_contents.clear()


def _inner(history_len):
    return _walk([sys._getframe(), sys._getframe(1)])


def test_caller_frame_local_is_named_with_the_running_function():
    history = [torch.zeros(3) for _ in range(4)]
    w = _inner(len(history))
    st = w.holders["history"]
    assert st.count == 4 and st.kind == "local"
    assert "test_caller_frame_local_is_named_with_the_running_function()" in st.note and "still running" in st.note


class NormLoggingSGD(torch.optim.SGD):
    def __init__(self, params, **kw):
        super().__init__(params, **kw)
        self.grad_history = []


def _trained_optimizer():
    model = nn.Linear(4, 2)
    opt = NormLoggingSGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        model(torch.ones(1, 4)).sum().backward()
        opt.grad_history.append(torch.cat([p.grad.flatten() for p in model.parameters()]).clone())
        opt.step()
    return model, opt


def test_extra_lists_on_the_optimizer_are_holders_but_its_state_is_not():
    model, opt = _trained_optimizer()
    assert opt.state  # momentum buffers exist
    h = _walk([sys._getframe()], model, opt).holders
    assert h["opt.grad_history"].count == 3 and h["opt.grad_history"].kind == "optimizer_attr"
    assert not any("state" in k or "param_groups" in k for k in h), list(h)


def test_optimizer_reached_by_no_variable_is_named_optimizer():
    h = _walk([], *_trained_optimizer()).holders
    assert h["optimizer.grad_history"].count == 3


class KeepsOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.y = y
        return y

    @staticmethod
    def backward(ctx, g):
        return g * ctx.y


def test_cycle_of_grad_made_with_create_graph_and_of_ctx_storing_the_output():
    x = torch.randn(5, requires_grad=True)
    x.tanh().sum().backward(create_graph=True)
    assert cycle_of(x) == "grad"
    x.grad = None  # break the cycle the test made
    assert cycle_of(x) == ""
    y = KeepsOutput.apply(torch.randn(3, requires_grad=True))
    try:
        assert cycle_of(y) == "ctx:KeepsOutput"
    finally:
        y.grad_fn.y = None
    assert cycle_of(torch.randn(3, requires_grad=True) * 2) == ""


def _births(cycle: str | None, holder: str = ""):
    recs = []
    for s in range(8, 40, 3):
        cohorts = [{"born": b, "site": "train.py:24", "holder": holder, "count": 1, "bytes": 8192, "grad": 0,
                    **({"cycle": cycle} if cycle else {})} for b in range(1, s - 1, 3)]
        recs.append({"step": s, "cohorts": cohorts})
    return recs


def _detect(records):
    return culprits.detect(Run({"device": "cpu"}, pd.DataFrame({"step": range(40), "time": range(40)}),
                               records=records))


def test_a_grad_cycle_is_a_retained_graph_at_the_creation_line():
    f = next(f for f in _detect({"births": _births("grad")}) if f.location == "train.py:24")
    assert f.kind == Kind.RETAINED_GRAPH and f.leak
    assert any("reference cycle" in e and "create_graph=True" in e for e in f.evidence)
    assert "torch.autograd.grad" in f.fix
    plain = next(f for f in _detect({"births": _births(None)}) if f.location == "train.py:24")
    assert plain.kind == Kind.SURVIVING_TENSORS and not any("reference cycle" in e for e in plain.evidence)


def test_a_ctx_cycle_names_the_function_and_the_cycle():
    f = next(f for f in _detect({"births": _births(None, holder="Coupling.ctx.out")}))
    assert f.location == "Coupling.ctx.out" and f.kind == Kind.SURVIVING_TENSORS
    assert any("reference cycle" in e and "Coupling" in e for e in f.evidence)
    assert "save_for_backward" in f.fix


def test_optimizer_hook_closure_is_named_and_a_tensor_hook_cycle_is_marked():
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = []

    def log_norm(optimizer, args, kwargs):
        norms.append(torch.stack([p.grad.norm() for p in model.parameters()]))

    handle = opt.register_step_post_hook(log_norm)
    try:
        for _ in range(3):
            model(torch.ones(1, 4)).sum().backward()
            opt.step()
        h = _walk([], model, opt).holders
        st = h["norms"]  # named by its variable, as a module hook's closure is
        assert st.count == 3 and "captured by hook log_norm on optimizer" in st.note
    finally:
        handle.remove()
    t = torch.randn(3, requires_grad=True) * 1
    hk = t.register_hook(lambda g: g * t.detach().sign())
    try:
        assert cycle_of(t).startswith("hook:")
    finally:
        hk.remove()


class Spike(RuntimeError):
    pass


def _failing_step(x):
    act = x * 3  # noqa: F841 (kept by the traceback)
    raise Spike


def _prefetch(n):
    staged = []
    for _ in range(n):
        t = torch.ones(4)
        staged.append(t)
        yield t


def test_caught_exceptions_keep_their_frames_locals_under_their_holder():
    skipped = []
    for _ in range(3):
        try:
            _failing_step(torch.ones(4))
        except Spike as e:
            skipped.append(e)
    st = _walk([sys._getframe()]).holders["skipped"]
    assert st.count == 6 and "traceback of a caught Spike" in st.note and "_failing_step()" in st.note


def test_a_suspended_generator_is_named_by_its_own_locals():
    it = _prefetch(10)
    for _ in range(4):
        next(it)
    h = _walk([sys._getframe()]).holders
    assert h["staged (local of generator _prefetch)"].count >= 3
    assert h["staged (local of generator _prefetch)"].kind == "local"


def test_referrers_name_a_generator_local_the_walk_cannot_reach():
    import weakref

    from memleak.probes.referrers import name_by_referrers

    gen = _prefetch(10)
    first = weakref.ref(next(gen))
    next(gen)
    # the generator sits in no frame the walk starts from: only gc referrers find its frame
    holder = {"g": gen}
    del gen
    assert name_by_referrers(first) == "staged (local of generator _prefetch)"
    holder.clear()


def _gen_then_del():
    import weakref

    t = torch.ones(3)
    yield weakref.ref(t)
    del t
    yield None


def test_walking_a_suspended_generator_keeps_none_of_its_locals_alive():
    gen = _gen_then_del()
    ref = next(gen)
    assert "t (local of generator _gen_then_del)" in _walk([sys._getframe()]).holders
    next(gen)  # the generator drops its tensor: no snapshot of its locals may keep it
    assert ref() is None


def test_a_tensor_hook_cycle_is_named_with_its_hook():
    f = next(f for f in _detect({"births": _births("hook:train.<locals>.keep")}) if f.location == "train.py:24")
    assert f.kind == Kind.SURVIVING_TENSORS
    assert any("reference cycle" in e and "train.<locals>.keep" in e for e in f.evidence)
    assert "handle.remove()" in f.fix


def _holder_rows(name: str, kind: str):
    return [{"step": s, "buffers": {}, "holders": [{"holder": name, "kind": kind, "count": s, "bytes": 1024 * s,
                                                   "grad": 0, "old": max(0, s - 2), "old_bytes": 0, "nodes": 0}]}
            for s in range(1, 30, 3)]


def test_closure_and_optimizer_holders_get_fixes_that_name_what_to_change():
    name = "losses (closure of make_train_step.<locals>.train_step)"
    f = next(f for f in _detect({"holders": _holder_rows(name, "closure")}) if f.location == name)
    assert f.kind == Kind.SURVIVING_TENSORS and f.leak
    assert f.fix.startswith("`losses`, a variable of the enclosing function") and "make_train_step" in f.fix
    o = next(f for f in _detect({"holders": _holder_rows("opt.grad_history", "optimizer_attr")}))
    assert "not the optimizer's own state" in o.fix and any(e.startswith("the optimizer attribute") for e in o.evidence)


def test_cycles_the_collector_keeps_freeing_are_still_a_leak():
    # every sampled step sees a new cohort caught in a ctx cycle, but a collection ran before any piled
    # up (each record holds only the newest): memory still grows between collections on every step
    recs = [{"step": s, "cohorts": [{"born": s - 3, "site": "fn.py:17", "holder": "", "count": 1, "bytes": 16384,
                                     "grad": 1, "cycle": "ctx:ScaledExp"}]} for s in range(8, 40, 6)]
    (f,) = [f for f in _detect({"births": recs}) if f.leak]
    # no name reaches them: the cycle says what holds them, the Function's ctx
    assert f.location == "ScaledExp.ctx" and f.kind == Kind.SURVIVING_TENSORS
    assert any("ScaledExp stores its output on ctx" in e for e in f.evidence)
    assert any("created at fn.py:17" in e for e in f.evidence)
    # one marked cohort alone is no pattern
    assert not [f for f in _detect({"births": recs[:1]}) if f.leak]


def test_a_cycle_site_named_on_some_steps_only_is_one_suspect_at_its_holder():
    recs = [{"step": s, "cohorts": [{"born": s - 3, "site": "fn.py:17", "holder": "" if s < 20 else "ScaledExp.ctx.out",
                                     "count": 1, "bytes": 16384, "grad": 1, "cycle": "ctx:ScaledExp"}]}
            for s in range(8, 40, 6)]
    leaks = [f for f in _detect({"births": recs}) if f.leak]
    assert [f.location for f in leaks] == ["ScaledExp.ctx.out"]


@functools.lru_cache(maxsize=None)
def _embedding(n):
    return torch.ones(n, 8)


@functools.lru_cache(maxsize=4)
def _bounded(n):
    return torch.ones(n, 8)


class _Items:
    @functools.lru_cache(maxsize=None)
    def __getitem__(self, i):
        return {"x": torch.full((4,), float(i))}


def test_an_lru_cache_is_walked_into_and_names_its_function():
    items = _Items()
    for n in range(1, 31):
        _embedding(n)
        _bounded(n)
        items[n]
    try:
        h = _walk([sys._getframe()]).holders
        unbounded, bounded = h["_embedding"], h["_bounded"]
        assert unbounded.kind == "lru_cache" and unbounded.count == 30 and unbounded.estimated
        assert "lru_cache of _embedding()" in unbounded.note
        assert bounded.count == 4  # a bounded cache keeps its results in links of a C list
        method = h["_Items.__getitem__"]  # a method's cache: the class is a global of this module
        assert method.kind == "lru_cache" and method.count == 30
    finally:
        _embedding.cache_clear(), _bounded.cache_clear(), _Items.__getitem__.cache_clear()


def test_what_hooks_registered_again_and_again_keep_is_named_as_piled_up_hooks():
    model = nn.Sequential(nn.Linear(4, 4))
    for _ in range(3):
        kept = []
        model[0].register_forward_hook(lambda m, i, o, kept=kept: kept.append(o.detach()))
        model(torch.ones(1, 4))
    h = _walk([sys._getframe()], model=model).holders
    st = h["kept"]
    assert st.kind == "piled_hook" and st.count == 6  # 3 + 2 + 1 outputs kept by 3 hooks
    assert "one of 3 hooks with this code on it" in st.note
    once = nn.Linear(4, 4)
    seen = []
    once.register_forward_hook(lambda m, i, o, seen=seen: seen.append(o.detach()))
    once(torch.ones(1, 4))
    assert _walk([sys._getframe()], model=once).holders["seen"].kind != "piled_hook"


class _Record:
    """A plain object holding a tensor in a tuple attribute, as logging.LogRecord keeps its args."""

    def __init__(self, *args):
        self.args = args


def test_referrers_name_an_attribute_of_an_object_with_inline_attributes():
    import weakref

    from memleak.probes.referrers import name_by_referrers

    t = torch.ones(3)
    kept = [_Record("loss %s", t)]  # Python 3.11+: the object itself, not a __dict__, refers to args
    ref = weakref.ref(t)
    del t
    assert name_by_referrers(ref) == "_Record.args"
    kept.clear()


def test_referrers_name_a_dict_key_that_is_no_string_without_its_address():
    import weakref

    from memleak.probes.referrers import name_by_referrers

    rec = _Record("x")
    key = torch.zeros(1)
    rec.by_batch = {weakref.ref(key): [torch.ones(3)]}  # the repr of such a key is an address
    ref = weakref.ref(next(iter(rec.by_batch.values()))[0])
    name = name_by_referrers(ref)
    assert name == "_Record.by_batch[...]", name
    del rec, key


def test_finished_futures_in_a_list_are_named_by_the_list():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        futures = [pool.submit(torch.ones, 64) for _ in range(3)]
        assert [f.result().shape for f in futures] == [torch.Size([64])] * 3
    # a finished Future keeps its result: the list of futures holds the tensors
    walk = _walk([sys._getframe()])
    assert walk.holders["futures"].count == 3
    futures.clear()


def _saved_growing():
    # autograd keeps more saved-for-backward bytes each sampled step, from a site no walk named
    return [{"step": s, "cohorts": [{"born": b, "site": "?", "count": 4, "bytes": 65536}
                                    for b in range(1, s - 1, 3)]} for s in range(8, 40, 3)]


def test_retained_graphs_go_to_the_referrer_named_holder_of_grad_tensors():
    births = _births(None, holder="LogRecord.args")
    for r in births:
        for c in r["cohorts"]:
            c["grad"] = 1  # each kept tensor has a grad_fn: it keeps its graph
    found = {f.location: f for f in _detect({"births": births, "saved": _saved_growing()})}
    f = found["LogRecord.args"]
    assert f.kind == Kind.RETAINED_GRAPH and f.leak
    assert any("saved for backward" in e for e in f.evidence)
    assert "?" not in found  # no second suspect for the same graphs
    # tensors without a graph do not take the graphs' evidence
    plain = {f.location: f for f in _detect({"births": _births(None, holder="LogRecord.args"),
                                             "saved": _saved_growing()})}
    assert plain["LogRecord.args"].kind == Kind.SURVIVING_TENSORS and "?" in plain


def _held(name, frames):
    st = _walk(frames).holders[name]
    return st.count, st.nbytes


def test_a_long_list_of_aliases_holds_one_storage_and_distinct_tensors_extrapolate():
    one = torch.zeros(1024)  # 4 KiB
    aliases = [one.detach() for _ in range(300)]  # 300 tensor objects, one storage
    distinct = [torch.zeros(1024) for _ in range(300)]
    count, nbytes = _held("aliases", [sys._getframe()])
    assert round(count) == 300 and nbytes == 4096  # sampled ends share it: counted once, not 300 / samples times
    count, nbytes = _held("distinct", [sys._getframe()])
    assert round(count) == 300 and round(nbytes) == 300 * 4096  # each sampled storage stands for those between
    del aliases, distinct


def test_a_long_dict_of_each_batchs_rows_extrapolates_their_storages():
    """Per-sample losses kept by sample index: each batch's 16 rows share one storage, and the dict's
    sampled ends share none, so each sampled storage stands for those between (counted once: 2
    storages for 300 batches, before)."""
    per_sample = {}
    for b in range(300):
        rows = torch.zeros(16, 64)  # 4 KiB a batch
        per_sample.update({16 * b + i: r for i, r in enumerate(rows)})
    count, nbytes = _held("per_sample", [sys._getframe()])
    assert round(count) == 4800 and 0.5 * 300 * 4096 <= nbytes <= 2 * 300 * 4096
    del per_sample


@pytest.mark.parametrize("make", [lambda: [0] * 900, lambda: np.empty(1000, dtype=object)],
                         ids=["list", "object_array"])
def test_slots_allocated_up_front_count_the_filled_ones(make):
    """``out_saved = [0] * 900`` (or ``np.empty(1000, dtype=object)``) filled in place from the
    front: its ends show placeholders and the same first tensors step after step; the count must
    follow the filled slots, not plateau."""
    slots = make()
    for i in range(60):
        slots[i] = torch.zeros(256)  # 1 KiB each
    count, nbytes = _held("slots", [sys._getframe()])
    assert round(count) == 60 and round(nbytes) == 60 * 1024, (count, nbytes)
    for i in range(60, 100):
        slots[i] = torch.zeros(256)
    count, _ = _held("slots", [sys._getframe()])
    assert round(count) == 100, count
    del slots


def test_buckets_made_up_front_count_the_filled_ones():
    """``outputs = [[] for _ in range(100)]``, one bucket per epoch, the first filling: its sampled
    ends are the full bucket and empty ones, and the full one stood for every bucket between them
    (533 tensors for 128, 4x the bytes, before)."""
    buckets = [[] for _ in range(100)]
    for _ in range(128):
        buckets[0].append(torch.zeros(256))  # 1 KiB each
    count, nbytes = _held("buckets", [sys._getframe()])
    assert round(count) == 128 and round(nbytes) == 128 * 1024, (count, nbytes)
    del buckets


def test_a_list_of_slots_filled_in_the_middle_counts_them():
    middle = [None] * 500
    middle[250:253] = [torch.zeros(256) for _ in range(3)]  # filled where no end is sampled
    count, _ = _held("middle", [sys._getframe()])
    assert round(count) == 3, count
    del middle


def test_a_weak_key_dictionary_holds_its_values_under_its_own_name():
    """Its keys are weak, its values strong: values that keep their keys alive (here through an
    attribute) keep both, and the dictionary is their holder."""
    import weakref

    class Key:
        pass

    cache = weakref.WeakKeyDictionary()
    for _ in range(5):
        k = Key()
        k.t = torch.zeros(256)
        cache[k] = (k, torch.zeros(256))
    del k
    walk = _walk([sys._getframe()])
    assert "cache" in walk.holders and round(walk.holders["cache"].count) == 10
    del cache


def test_holders_made_one_per_step_fold_into_one_that_grows():
    """``setattr(obj, f"act_{step}", t)``: each attribute holds one tensor and none grows; the walk
    counts the family as one holder, `act_*`. A few numbered names (three heads) stay apart, and a
    number in the path (a layer's index) makes no family."""
    from memleak.holder_names import family_name

    class Recorder:
        pass

    rec = Recorder()
    rec.head_0, rec.head_1, rec.head_2 = torch.zeros(4), torch.zeros(4), torch.zeros(4)
    for step in range(10):
        setattr(rec, f"act_{step}", torch.zeros(256))
    walk = _walk([sys._getframe()])
    st = walk.holders["rec.act_*"]
    assert round(st.count) == 10 and round(st.nbytes) == 10 * 1024 and "10 holders" in st.note
    assert not any(h.startswith("rec.act_") and h != "rec.act_*" for h in walk.holders)
    assert {"rec.head_0", "rec.head_1", "rec.head_2"} <= set(walk.holders)
    assert walk.tensor_holder[id(rec.act_7)] == "rec.act_*"
    assert family_name("blocks.3.cache") is None and family_name("cache['step_3']") is None
    assert family_name("model.buf12x3") == "model.buf*x*"
    assert family_name("heads.task7.weight") == "heads.task*.weight"  # a module added per task
    assert family_name("x (local of step3)") is None
    del rec


def test_a_buffering_log_handler_holds_the_tensors_its_records_were_given():
    """``log.debug("loss %s", loss)`` with a handler that buffers (``MemoryHandler``, never flushed
    below CRITICAL): each record keeps its arguments, and the logger's handlers hold them."""
    import logging
    import logging.handlers

    log = logging.getLogger("memleak-test-buffered")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(logging.handlers.MemoryHandler(capacity=10**6, flushLevel=logging.CRITICAL + 1))
    try:
        for step in range(5):
            log.debug("step %d loss %s", step, torch.zeros(256))
        walk = _walk([sys._getframe()])  # the handler is reached through the logger alone
        # the handler's own buffer, through the logger's list of handlers
        assert round(walk.holders["log.handlers[...].buffer"].count) == 5, sorted(walk.holders)
    finally:
        for handler in list(log.handlers):
            log.removeHandler(handler)
            handler.buffer.clear()


def test_state_dicts_kept_in_a_long_list_hold_the_weights_once():
    model = nn.Linear(64, 64)
    weights = sum(p.numel() * 4 for p in model.parameters())
    history = [model.state_dict() for _ in range(200)]  # shallow: aliases of the parameters
    count, nbytes = _held("history", [sys._getframe()])
    assert round(count) == 400 and nbytes == weights, (count, nbytes, weights)
    del history


def test_numpy_arrays_sharing_tensor_memory_are_walked_to_their_tensors():
    # `t.numpy()` of a CPU tensor shares its storage: the array's base is a tensor. Arrays are not
    # seen by the garbage collector, so only the walk (array -> base) finds what they keep
    kept = [torch.zeros(1024).numpy() for _ in range(3)]
    views = [torch.zeros(1024).numpy()[::2] for _ in range(2)]  # a view of the array keeps it
    mv = [memoryview(torch.zeros(256).numpy())]
    objs = np.empty(2, dtype=object)
    objs[0], objs[1] = torch.zeros(8), "x"  # an array of objects keeps its items
    walk = _walk([sys._getframe()])
    assert walk.holders["kept"].count == 3 and walk.holders["kept"].nbytes == 3 * 4096
    assert walk.holders["views"].count == 2
    assert walk.holders["mv"].count == 1
    assert walk.holders["objs"].count == 1
    # the arrays share their tensors' memory (said in the evidence, and the fix says to copy);
    # a tensor an object array holds is the tensor itself, no shared memory
    assert walk.holders["kept"].arrays == 3 and walk.holders["mv"].arrays == 1
    assert walk.holders["objs"].arrays == 0
    del kept, views, mv, objs


def test_numpy_arrays_with_memory_of_their_own_are_counted_under_their_holder():
    # copies (np.append, .copy(), loaded data) are host memory no tensor count sees; a view counts its
    # base once; an array over a tensor's memory is the tensor's, and an object array only its items
    own = [np.zeros(1024, dtype=np.float32) for _ in range(3)]
    grown = np.append(np.zeros(100), np.ones(156))
    whole = np.zeros(256)
    halves = [whole[:128], whole[128:]]  # two views of one array: its 2 KiB once
    del whole
    shared = [torch.zeros(64).numpy()]
    walk = _walk([sys._getframe()])
    st = walk.holders["own"]
    assert (st.count, st.np_arrays, st.nbytes, st.arrays) == (3, 3, 3 * 4096, 0)
    assert (walk.holders["grown"].np_arrays, walk.holders["grown"].nbytes) == (1, 2048)
    assert (walk.holders["halves"].np_arrays, walk.holders["halves"].nbytes) == (1, 2048)
    assert walk.holders["shared"].np_arrays == 0 and walk.holders["shared"].arrays == 1
    row = st.row()
    assert row.np_arrays == 3 and row.count == 3
    del own, grown, halves, shared


def test_a_holder_of_arrays_that_share_memory_is_told_to_keep_copies():
    from memleak.detect import holder_growth
    from memleak.records import HolderRow, HoldersRecord

    def records(arrays_share):
        return [HoldersRecord(step=s, holders=(HolderRow("embeddings", "local", count=s, bytes=4096 * s, old=s - 2,
                                                         arrays=s if arrays_share else 0),))
                for s in range(2, 22, 2)]

    for share, copy in ((True, True), (False, False)):
        findings: dict = {}
        holder_growth.holder_findings(records(share), {}, None, findings, set())
        f = findings["embeddings"]
        assert ("numpy().copy()" in f["fix"]) is copy
        assert any("share their memory" in e for e in f["evidence"]) is share
    # arrays with memory of their own: said as arrays, and the fix is to keep less, not to copy
    own = [HoldersRecord(step=s, holders=(HolderRow("preds", "local", count=s, bytes=4096 * s, old=s - 2,
                                                    np_arrays=s),)) for s in range(2, 22, 2)]
    findings = {}
    holder_growth.holder_findings(own, {}, None, findings, set())
    f = findings["preds"]
    assert "holds 20 numpy arrays" in f["evidence"][0]
    assert "host memory" in f["fix"] and "copy()" not in f["fix"]


def test_tensors_in_pandas_columns_are_named_by_what_holds_the_frames():
    frames = [pd.DataFrame({"step": [i], "feats": [torch.zeros(256)]}) for i in range(3)]
    series = pd.Series([torch.zeros(16), None])
    walk = _walk([sys._getframe()])
    # each frame's tensor, and its int column: an array with memory of its own (8 B)
    frames_st = walk.holders["frames"]
    assert (frames_st.count, frames_st.np_arrays, frames_st.nbytes) == (6, 3, 3 * 1024 + 3 * 8)
    assert walk.holders["series"].count == 1
    del frames, series


class _Tracker:
    """Maps what it tracks by id and forgets it when it dies: its own bound method is the callback."""

    def __init__(self):
        self.refs = {}

    def track(self, obj):
        import weakref

        self.refs[id(obj)] = obj
        return weakref.finalize(obj, self.forget, id(obj))

    def forget(self, key):
        self.refs.pop(key, None)


def test_tensors_kept_through_a_weakref_finalize_callback_are_named_by_its_owner():
    """No variable names the trackers: only the finalizer registry keeps them (and so their tensors)."""
    finalizers = [_Tracker().track(torch.ones(8)) for _ in range(3)]  # a finalize object reaches nothing
    try:
        h = _walk([sys._getframe()]).holders
        st = h["_Tracker.refs"]
        assert st.count == 3 and st.kind == "finalizer"
        assert "weakref.finalize" in st.note
        # level modules' scan walks the model tree only: the process's finalizers are not the model's
        scan = walk_roots(step=1, model=nn.Linear(2, 2), optimizer=None, ages=Ages(), exclude=set(), frames=[])
        assert "_Tracker.refs" not in scan.holders
    finally:
        for f in finalizers:
            f()


def test_a_library_global_found_by_referrers_is_named_after_its_module_and_a_user_global_is_not(tmp_path):
    import site
    import types
    import weakref

    from memleak.probes.referrers import name_by_referrers

    def module(name: str, file: str) -> types.ModuleType:
        m = types.ModuleType(name)
        m.__file__ = file
        m._CACHE = [torch.ones(3)]  # a list in the module's globals, as `_CACHE.append(t)` leaves it
        return m

    library = module("somelib.metrics", f"{site.getsitepackages()[0]}/somelib/metrics.py")
    mine = module("my_helpers", str(tmp_path / "my_helpers.py"))
    assert name_by_referrers(weakref.ref(library._CACHE[0])) == "somelib.metrics._CACHE"
    assert name_by_referrers(weakref.ref(mine._CACHE[0])) == "_CACHE"  # the user's own code: its name


def test_referrers_name_a_dict_hung_on_a_function_by_the_function():
    import weakref

    from memleak.probes.referrers import name_by_referrers

    def cache_on_me():
        pass

    cache_on_me.by_step = {0: torch.ones(3)}  # noqa: B018 - what code hangs on a function
    ref = weakref.ref(cache_on_me.by_step[0])
    name = name_by_referrers(ref)
    assert name.startswith("test_referrers_name_a_dict_hung_on_a_function_by_the_function.<locals>.cache_on_me.by_step"), name
    del cache_on_me


def _module_level_keeper():
    pass


def test_an_attribute_hung_on_a_module_level_function_is_walked_by_its_name():
    from memleak.probes.holders import walk_roots
    from memleak.probes.identity import Ages

    _module_level_keeper.by_step = {i: torch.ones(4) for i in range(3)}
    try:
        frame = sys._getframe()
        walk = walk_roots(step=3, model=None, optimizer=None, ages=Ages(), exclude=set(), frames=[frame])
        st = walk.holders["_module_level_keeper.by_step"]
        assert st.count == 3 and st.kind == "global"
    finally:
        del _module_level_keeper.by_step


def test_a_no_grad_view_kept_by_a_holder_keeps_its_bases_graph():
    # what torchmetrics' update stores of the predictions it is given: a view made under no_grad has
    # no grad_fn of its own, yet its _base keeps the step's autograd graph alive
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    kept_preds = []
    for _ in range(3):
        probs = model(torch.randn(5, 8)).softmax(-1)
        with torch.no_grad():
            kept_preds.append(probs.transpose(0, 1).reshape(4, -1).T)
    assert kept_preds[0].grad_fn is None and kept_preds[0]._base.grad_fn is not None
    st = _walk([sys._getframe()]).holders["kept_preds"]
    assert st.n_grad == 3 and st.nodes >= 3 * 4, (st.n_grad, st.nodes)
    detached = [p.detach() for p in kept_preds]  # a detached view keeps no graph
    del kept_preds, probs
    assert _walk([sys._getframe()]).holders["detached"].n_grad == 0


_REGISTRY: list = []


class _Evaluator:
    def __init__(self):
        self.preds = []
        _REGISTRY.append(self)  # every evaluator made, kept for the process's life


def test_a_local_naming_the_latest_of_many_kept_objects_gives_way_to_their_container():
    _REGISTRY.clear()
    for _ in range(3):
        ev = _Evaluator()  # a new one each "epoch": the local names only the latest
        for _ in range(2):
            ev.preds.append(torch.ones(4))
    w = walk_roots(step=5, model=None, optimizer=None, ages=Ages(), exclude=set(), frames=[sys._getframe()])
    st = w.holders["_REGISTRY[...].preds"]
    assert st.count == 6
    assert "ev.preds" not in w.holders
    _REGISTRY.clear()


def test_items_of_a_user_dict_in_a_list_are_named_by_the_list():
    """A tokenizer's BatchEncoding (a collections.UserDict) kept per step: its items are its own,
    so the list is the holder (`seen`), not `seen[...].data`; a UserList's likewise."""
    import collections

    class Encoding(collections.UserDict):
        pass

    seen = [Encoding({"logits": torch.randn(4, 8), "ids": torch.ones(4)}) for _ in range(3)]
    rows = collections.UserList([torch.randn(2) for _ in range(3)])
    w = _walk([sys._getframe()])
    assert w.holders["seen"].count == 6, sorted(w.holders)
    assert w.holders["rows"].count == 3, sorted(w.holders)
    assert not any(".data" in name for name in w.holders), sorted(w.holders)
    del seen, rows
