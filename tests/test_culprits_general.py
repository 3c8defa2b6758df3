"""Culprit naming on shapes of code the scenario corpus does not contain: the general
mechanisms (reference walk, birth tracking, graph counting) must name the holder."""
import collections
import contextvars

import pytest
import torch
from torch import nn

import memleak
from memleak.schema import Kind


def _model_and_optimizer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _step(model, opt):
    out = model(torch.randn(32, 64))
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return out, loss


def remember(t, _seen=[]):  # noqa: B006 - a mutable default argument is the case under test
    _seen.append(t)


class Stats:
    def __init__(self):
        self.history = []


def dict_by_step(model, opt, n):
    outputs = {}
    for i in range(n):
        outputs[i], _ = _step(model, opt)


def list_in_defaultdict(model, opt, n):
    stats = collections.defaultdict(list)
    for _ in range(n):
        stats["loss"].append(_step(model, opt)[1])


def list_of_dicts(model, opt, n):
    records = []
    for i in range(n):
        out, loss = _step(model, opt)
        records.append({"pred": out, "step": i})


def mutable_default(model, opt, n):
    remember.__defaults__[0].clear()
    for _ in range(n):
        remember(_step(model, opt)[0])


def growing_cat(model, opt, n):
    all_preds = torch.empty(0, 8)
    for _ in range(n):
        all_preds = torch.cat([all_preds, _step(model, opt)[0].detach()])  # one tensor, ever larger


def running_sum(model, opt, n):
    loss_sum = 0
    for _ in range(n):
        loss_sum = loss_sum + _step(model, opt)[1]  # not in place: a new graph node each step


def tensors_as_dict_keys(model, opt, n):
    seen = {}
    for i in range(n):
        seen[_step(model, opt)[0].detach()] = i


def helper_object_on_the_model(model, opt, n):
    model.stats = Stats()
    for _ in range(n):
        model.stats.history.append(_step(model, opt)[0].detach())


def attribute_per_step(model, opt, n):
    for i in range(n):
        setattr(model[1], f"act_{i}", _step(model, opt)[0].detach())  # a new name each step


def head_per_task(model, opt, n):
    heads = nn.ModuleDict()
    for i in range(n):
        _step(model, opt)
        heads[f"task{i}"] = nn.Linear(64, 8)  # a module (its weights) added each step, never dropped


def object_array_slots(model, opt, n):
    import numpy as np

    preds = np.empty(1000, dtype=object)  # made up front, filled in place
    for i in range(n):
        preds[i] = _step(model, opt)[0].detach()


def parameters_in_a_list(model, opt, n):
    plist = []
    for _ in range(n):
        plist.append(nn.Parameter(_step(model, opt)[0].detach().clone()))  # not the model's


def optimizer_per_step(model, opt, n):
    opts = []
    for _ in range(n):
        _step(model, opt)
        extra = torch.optim.Adam(model.parameters(), lr=1e-9)
        extra.step()  # its moments for the model's parameters: memory of its own
        opts.append(extra)


class Node:
    def __init__(self, value, prev):
        self.value, self.prev = value, prev


def linked_list(model, opt, n):
    head = None
    for _ in range(n):
        head = Node(_step(model, opt)[0].detach(), head)  # each node links to the last


def grad_fns_kept(model, opt, n):
    fns = []
    for _ in range(n):
        fns.append((_step(model, opt)[0] * 2).sum().grad_fn)  # the graph, without its tensor


def lambda_defaults(model, opt, n):
    callbacks = []
    for _ in range(n):
        out = _step(model, opt)[0].detach()
        callbacks.append(lambda o=out: o.sum())  # the default argument binds the tensor


def list_on_a_parameter(model, opt, n):
    model[0].weight.seen = []
    try:
        for _ in range(n):
            model[0].weight.seen.append(_step(model, opt)[0].detach())  # a list hung on a parameter
    finally:
        del model[0].weight.seen


def list_on_a_buffer(model, opt, n):
    model.register_buffer("running", torch.zeros(8))
    model.running.seen = []  # a list hung on a buffer, as on a parameter
    for _ in range(n):
        model.running.seen.append(_step(model, opt)[0].detach())


def list_on_a_torch_class(model, opt, n):
    nn.Linear.seen = []  # hung on torch's class by a debugging helper
    try:
        for _ in range(n):
            nn.Linear.seen.append(_step(model, opt)[0].detach())
    finally:
        del nn.Linear.seen


def distributions_kept(model, opt, n):
    dists = []
    for _ in range(n):
        dists.append(torch.distributions.Categorical(logits=_step(model, opt)[0]))  # its logits, graph and all


def list_on_a_scheduler(model, opt, n):
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    sched.losses = []
    for _ in range(n):
        sched.losses.append(_step(model, opt)[1].detach())
        sched.step()


SEEN_OUTPUTS = contextvars.ContextVar("seen_outputs")


def context_var_value(model, opt, n):
    SEEN_OUTPUTS.set([])  # a list in this thread's context, reached through the ContextVar
    for _ in range(n):
        SEEN_OUTPUTS.get().append(_step(model, opt)[0].detach())


def queue_nobody_reads(model, opt, n):
    import multiprocessing

    q = multiprocessing.Queue()
    q.cancel_join_thread()  # the pipe fills: the test process must not wait for the feeder at exit
    for _ in range(n):
        _step(model, opt)
        q.put(torch.randn(128, 256).numpy())  # 128 KiB a step; the pipe takes 64 KiB, the rest stays here


def queue_whose_consumer_died(model, opt, n):
    import queue
    import threading

    q: queue.Queue = queue.Queue()

    def consume():
        q.get()
        raise_in_thread = 1 / 0  # noqa: F841 (an exception ends the thread, silently for the loop)

    old_hook = threading.excepthook
    threading.excepthook = lambda args: None
    try:
        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        for _ in range(n):
            q.put(_step(model, opt)[0].detach())
    finally:
        threading.excepthook = old_hook


def executor_behind(model, opt, n):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    uploader = ThreadPoolExecutor(max_workers=1)
    release = threading.Event()
    uploader.submit(release.wait)  # the one worker is busy: every later task waits in the queue
    try:
        for _ in range(n):
            uploader.submit(len, _step(model, opt)[0].detach().clone())
    finally:
        release.set()
        uploader.shutdown(cancel_futures=True)


def simple_queue_nobody_reads(model, opt, n):
    import queue

    q: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(n):
        q.put(_step(model, opt)[0].detach())


def remember_on_the_function(model, opt, n):
    def keep(t):
        keep.seen.append(t)  # an attribute hung on the function: it lives as long as the function

    keep.seen = []
    for _ in range(n):
        keep(_step(model, opt)[0].detach())


class _Scratch:
    def keep(self, t, _seen=[]):  # noqa: B006 - a mutable default on a method: the case under test
        _seen.append(t)


def mutable_default_on_a_method(model, opt, n):
    _Scratch.keep.__defaults__[0].clear()
    scratch = _Scratch()
    for _ in range(n):
        scratch.keep(_step(model, opt)[0].detach())


class _PredictionWriter:
    def __init__(self):
        self.preds = []

    def on_batch_end(self, out):
        self.preds.append(out)


def callback_in_a_list(model, opt, n):
    callbacks = [_PredictionWriter()]  # a trainer's callbacks: the list is fixed, the writer's list grows
    for _ in range(n):
        out = _step(model, opt)[0].detach()
        for cb in callbacks:
            cb.on_batch_end(out)


def _keep_last(t):
    _keep_last.by_step[len(_keep_last.by_step)] = t  # a dict hung on a module-level function


_keep_last.by_step = {}


def remember_on_a_module_function(model, opt, n):
    for _ in range(n):
        _keep_last(_step(model, opt)[0].detach())


def chained_iterators(model, opt, n):
    import itertools

    pending = iter(())
    for _ in range(n):  # each step wraps the last chain: the tuple iterators inside keep every item
        pending = itertools.chain(pending, [_step(model, opt)[0].detach()])


def chain_map_children(model, opt, n):
    scopes = collections.ChainMap()
    for _ in range(n):
        scopes = scopes.new_child({"out": _step(model, opt)[0].detach()})


def bytes_gathered(model, opt, n):
    raw = bytearray()  # one buffer, grown in place: no container of items
    for _ in range(n):
        _step(model, opt)
        raw += torch.randn(64, 256).numpy().tobytes()  # 64 KiB a step


def text_gathered(model, opt, n):
    log_text = ""  # one string rebound to a longer one every step: no container, no buffer
    for _ in range(n):
        out, loss = _step(model, opt)
        log_text += f"loss {loss.item():.6f} probs {out.softmax(-1).tolist()}\n"


def bytes_written(model, opt, n):
    import io

    sink = io.BytesIO()
    for _ in range(n):
        _step(model, opt)
        sink.write(torch.randn(64, 256).numpy().tobytes())


def text_written(model, opt, n):
    import io

    session_log = io.StringIO()  # a logging handler's stream: its size leaves out its text
    for _ in range(n):
        out, loss = _step(model, opt)
        session_log.write(f"loss {loss.item():.6f} probs {out.softmax(-1).tolist()}\n")


def storages_kept(model, opt, n):
    pages = []  # a tensor's storage kept without the tensor: its bytes stay
    for _ in range(n):
        pages.append(_step(model, opt)[0].detach().clone().untyped_storage())


def typed_storages_kept(model, opt, n):
    import warnings

    pages = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TypedStorage is deprecated: still in use
        for _ in range(n):
            pages.append(_step(model, opt)[0].detach().clone().storage())


def saved_in_memory(model, opt, n):
    import io

    blobs = []
    for _ in range(n):
        _step(model, opt)
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)  # a checkpoint in host memory: bytes, no tensor
        blobs.append(buf)


@pytest.mark.parametrize("loop, holder", [
    (dict_by_step, "outputs"), (list_in_defaultdict, "stats['loss']"), (list_of_dicts, "records"),
    (mutable_default, "remember._seen"), (growing_cat, "all_preds"), (running_sum, "loss_sum"),
    (tensors_as_dict_keys, "seen"), (helper_object_on_the_model, "stats.history"),
    (attribute_per_step, "1.act_*"), (head_per_task, "heads.task*."), (object_array_slots, "preds"),
    (parameters_in_a_list, "plist"), (optimizer_per_step, "opts"), (linked_list, "head.value"),
    (grad_fns_kept, "fns"), (saved_in_memory, "blobs"), (lambda_defaults, "callbacks"),
    (list_on_a_parameter, "0.weight.seen"), (list_on_a_buffer, "running.seen"),
    (list_on_a_torch_class, "Linear.seen"), (distributions_kept, "dists"), (list_on_a_scheduler, "sched.losses"),
    (storages_kept, "pages"), (typed_storages_kept, "pages"), (context_var_value, "SEEN_OUTPUTS"),
    (queue_nobody_reads, "q"), (remember_on_the_function, "keep.seen"),
    (remember_on_a_module_function, "_keep_last.by_step"), (callback_in_a_list, "callbacks[...].preds"),
    (mutable_default_on_a_method, "_Scratch.keep._seen"),
    (chained_iterators, "pending"),
    (chain_map_children, "scopes.maps"), (bytes_gathered, "raw"), (bytes_written, "sink"), (text_written, "session_log"), (text_gathered, "log_text"),
])
def test_the_holder_is_named_first(loop, holder):
    model, opt = _model_and_optimizer()
    with memleak.track(model, optimizer=opt) as tracker:
        loop(model, opt, 40)
    report = tracker.report()
    assert report.verdict == "leak", str(report)
    assert holder in report.suspects[0].location, str(report)


def flushed_buffer(model, opt, n):
    buf = []
    for _ in range(n):
        buf.append(_step(model, opt)[0].detach())
        if len(buf) == 10:
            buf.clear()


def replaced_each_step(model, opt, n):
    last = None
    for _ in range(n):
        last = _step(model, opt)[0].detach().clone()  # noqa: F841


@pytest.mark.parametrize("loop", [flushed_buffer, replaced_each_step])
@pytest.mark.parametrize("level", ["counters", "full"])
def test_bounded_holders_are_clean(loop, level):
    model, opt = _model_and_optimizer()
    with memleak.track(model, optimizer=opt, level=level) as tracker:
        loop(model, opt, 40)
    assert tracker.report().verdict == "clean", str(tracker.report())


def test_a_family_of_holders_made_one_per_step_is_told_to_reuse_or_drop_them():
    model, opt = _model_and_optimizer()
    with memleak.track(model, optimizer=opt) as tracker:
        attribute_per_step(model, opt, 40)
    top = tracker.report().suspects[0]
    assert top.location == "1.act_*"
    assert "made every step" in top.fix and "delattr" in top.fix, top.fix


class _Trainer:
    def __init__(self):
        self.epoch_end_callbacks = []


def callbacks_capture_outputs(model, opt, n):
    trainer = _Trainer()
    for _ in range(n):
        out, loss = _step(model, opt)
        trainer.epoch_end_callbacks.append(lambda loss=loss, out=out: print(float(loss), float(out.std())))


@pytest.mark.parametrize("loop, says", [
    (linked_list, "`head` is a chain of objects"),
    # lambdas that bind a step's tensors as default arguments, one a step: not a list of tensors
    (callbacks_capture_outputs, "`trainer.epoch_end_callbacks` keeps callbacks (lambdas, closures, partials)"),
    (queue_nobody_reads, "`q` is a multiprocessing.Queue that nothing empties"),
    # a queue.Queue whose consumer thread died: named by the queue, not as `q.queue`
    (queue_whose_consumer_died, "`q` is a queue between threads (queue.Queue, SimpleQueue) whose items pile up"),
    # an executor's tasks waiting for a busy worker, each with its tensor: not a list to bound
    (executor_behind, "`uploader._work_queue` is a ThreadPoolExecutor's queue of tasks"),
    (simple_queue_nobody_reads, "`q` is a queue between threads (queue.Queue, SimpleQueue) whose items pile up"),
    (bytes_gathered, "`raw` is one object that grows every step"),
    (text_gathered, "`log_text` is one object that grows every step"),
    (optimizer_per_step, "keeps optimizers besides the tracked one"),
    # a list the loop hangs on a parameter: no module caches it in forward
    (list_on_a_parameter, "`0.weight.seen` keeps gaining tensors"),
    # one tensor concatenated onto itself: not a list to bound or to fill with numbers
    (growing_cat, "`all_preds` is one tensor replaced every step by a larger one"),
    # grad_fns kept without their tensors: no numpy arrays (it once said so), no tensors to detach
    (grad_fns_kept, "`fns` keeps autograd graph objects"),
])
def test_chains_kept_optimizers_and_unread_queues_are_told_how_to_cut_them(loop, says):
    model, opt = _model_and_optimizer()
    with memleak.track(model, optimizer=opt) as tracker:
        loop(model, opt, 40)
    top = tracker.report().suspects[0]
    assert says in top.fix, str(tracker.report())


@pytest.mark.parametrize("hkind, says", [
    ("lru_cache", "`embed.cache_clear()`"), ("finalizer", "weakref.finalize"), ("default_arg", "Default to `None`"),
])
def test_holders_that_live_as_long_as_a_function_get_the_fix_of_their_kind(hkind, says):
    from memleak.detect.culprit_fixes import culprit_fix
    from memleak.schema import Kind

    fix = culprit_fix(Kind.SURVIVING_TENSORS, "embed", hkind, chained=False, has_grad=False, saved_growing=False)
    assert fix.startswith("`embed`") and says in fix and "{" not in fix, fix


def test_an_attribute_list_is_not_called_a_metric_s_state():
    """`hist.samples` of an object that is no metric (a replay buffer, a snapshot list) is told what
    to keep or how to bound it; a metric's state has its own kind, told apart by the walk."""
    from memleak.detect.culprit_fixes import culprit_fix
    from memleak.schema import Kind

    fix = culprit_fix(Kind.SURVIVING_TENSORS, "hist.samples", "global", chained=False, has_grad=False, saved_growing=False)
    assert fix.startswith("`hist.samples` keeps gaining tensors") and "accumulator" not in fix, fix
    assert "metric" not in fix and "reset()" not in fix, fix
    plain = culprit_fix(Kind.SURVIVING_TENSORS, "history", "global", chained=False, has_grad=False, saved_growing=False)
    assert "reset()" not in plain, plain


def test_a_class_level_list_of_a_class_imported_from_a_user_module_is_named(tmp_path, monkeypatch):
    import importlib

    (tmp_path / "registry_mod.py").write_text(
        "class Registry:\n    items = []\n\n    @classmethod\n    def add(cls, t):\n        cls.items.append(t)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    Registry = importlib.import_module("registry_mod").Registry  # noqa: N806 - named in this frame, as imported
    model, opt = _model_and_optimizer()
    try:
        with memleak.track(model, optimizer=opt) as tracker:
            for _ in range(40):
                Registry.add(_step(model, opt)[0].detach())
        top = tracker.report().suspects[0]
        assert top.location == "Registry.items", str(tracker.report())
    finally:
        Registry.items.clear()
        monkeypatch.delitem(__import__("sys").modules, "registry_mod")


def test_a_global_of_another_user_module_is_named_after_it_with_its_storing_line_there(tmp_path, monkeypatch):
    """A logging package vendored beside the script keeps a module-level dict of lists; the loop
    calls its function. Named `fastlog._BUFFER['logits']` (not a bare `_BUFFER`), filled at the
    package's own line; a registry object imported from utils.py is filled by its method there."""
    import importlib

    pkg = tmp_path / "fastlog"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("_BUFFER = {}\n\ndef log(name, t):\n    _BUFFER.setdefault(name, []).append(t)\n")
    (tmp_path / "metrics_reg.py").write_text(
        "class _Reg:\n    def __init__(self):\n        self.series = {}\n\n    def record(self, t):\n"
        "        self.series.setdefault('x', []).append(t)\n\n\nregistry = _Reg()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fastlog = importlib.import_module("fastlog")
    registry = importlib.import_module("metrics_reg").registry
    model, opt = _model_and_optimizer()
    try:
        for keep, location, stored in [
            (lambda t: fastlog.log("logits", t), "fastlog._BUFFER['logits']", "fastlog/__init__.py:4"),
            (registry.record, "registry.series['x']", "metrics_reg.py:6"),
        ]:
            with memleak.track(model, optimizer=opt) as tracker:
                for _ in range(40):
                    keep(_step(model, opt)[0].detach())
            top = tracker.report().suspects[0]
            assert top.location == location, str(tracker.report())
            assert top.fix.startswith(f"At {stored}:"), str(tracker.report())
            fastlog._BUFFER.clear()
            registry.series.clear()
    finally:
        monkeypatch.delitem(__import__("sys").modules, "fastlog")
        monkeypatch.delitem(__import__("sys").modules, "metrics_reg")


class _Uploader(__import__("threading").Thread):
    def __init__(self, t, release):
        super().__init__(daemon=True)
        self.payload, self.release = t, release

    def run(self):
        self.release.wait(60)


@pytest.mark.parametrize("how, location", [
    ("thread", "Thread(target=upload)"), ("timer", "Thread(target=upload)"), ("subclass", "_Uploader.payload"),
])
def test_threads_started_each_step_that_still_run_are_named(how, location):
    import threading

    release = threading.Event()

    def upload(t):
        release.wait(60)  # slower than the loop: each running thread keeps its argument

    model, opt = _model_and_optimizer()
    try:
        with memleak.track(model, optimizer=opt) as tracker:
            for _ in range(40):
                out = _step(model, opt)[0].detach().clone()
                if how == "thread":
                    threading.Thread(target=upload, args=(out,), daemon=True).start()
                elif how == "timer":  # a save put off by a minute: the Timer keeps its arguments
                    timer = threading.Timer(60, upload, args=(out,))
                    timer.daemon = True
                    timer.start()
                else:
                    _Uploader(out, release).start()
        top = tracker.report().suspects[0]
        assert top.location == location, str(tracker.report())
        assert "ThreadPoolExecutor" in top.fix
    finally:
        release.set()
        for th in threading.enumerate():
            if isinstance(th, threading.Timer):
                th.cancel()


def _kept_at_exit(steps, keep):
    """A tracked loop that registers an atexit callback with `keep(output)` every step (unregistered after)."""
    import atexit

    def save_on_exit(t):
        pass

    model, opt = _model_and_optimizer()
    try:
        with memleak.track(model, optimizer=opt) as tracker:
            for _ in range(steps):
                atexit.register(save_on_exit, keep(_step(model, opt)[0]))
    finally:
        atexit.unregister(save_on_exit)
    return tracker.report()


def test_tensors_kept_by_a_registry_in_c_get_a_fix_that_names_such_registries():
    """`atexit.register(save, t)` every step: atexit keeps its callbacks in C, where no walk or gc
    referrer reaches; the fix names such registries beside the reference cycles it mentioned."""
    report = _kept_at_exit(40, lambda out: out.detach())
    assert report.verdict == "leak", str(report)
    assert "atexit.register" in report.suspects[0].fix, str(report)


def test_outputs_kept_with_their_graphs_by_a_registry_in_c_are_a_retained_graph_that_explains_the_heap():
    """The same registry given the outputs themselves: each keeps its autograd nodes (the heap grows
    several times the outputs' bytes). What no name holds but carries a grad_fn is a retained graph,
    and it explains the heap's growth (it read surviving_tensors, "only 19 % explained: look for a
    second cause")."""
    report = _kept_at_exit(100, lambda out: out)
    top = report.suspects[0]
    assert report.verdict == "leak" and top.kind == Kind.RETAINED_GRAPH, str(report)
    assert top.location == "atexit callbacks", str(report)  # counted each step (probes/runtime.py)
    assert not any(s.kind == Kind.LINEAR_GROWTH for s in report.suspects), str(report)


class _TreeNode:
    def __init__(self, value, parent=None):
        self.value, self.parent, self.children = value, parent, []
        if parent is not None:
            parent.children.append(self)  # a back link: parent and child refer to each other


def test_with_the_collector_off_unreachable_survivors_get_the_reference_cycle_fix():
    """A small tree made every step with `gc.disable()` on: each tree is a reference cycle that only a
    collection frees. The fix says so (break the cycle or collect), not how to bound a list."""
    import gc

    model, opt = _model_and_optimizer()
    was = gc.isenabled()
    gc.disable()
    try:
        with memleak.track(model, optimizer=opt) as tracker:
            for _ in range(40):
                out = _step(model, opt)[0].detach()
                _TreeNode(out * 2, _TreeNode(out))
    finally:
        if was:
            gc.enable()
        gc.collect()
    report = tracker.report()
    assert report.verdict == "leak", str(report)
    top = report.suspects[0]
    assert "reference cycles" in top.fix and "gc.collect()" in top.fix and "deque" not in top.fix, str(report)
    assert tracker.run().meta["gc_enabled"] is False


def test_a_chained_module_attribute_s_fix_shows_code_that_runs():
    """`1.running_mean` (a Sequential child's attribute) is no Python expression: the fix's example
    names it as the module's code does, `self.running_mean = self.running_mean.detach()`."""
    from memleak.detect.culprit_fixes import culprit_fix
    from memleak.schema import Kind

    fix = culprit_fix(Kind.RETAINED_GRAPH, "1.running_mean", "module_attr", chained=True, has_grad=True,
                      saved_growing=False, same_object=False)
    assert "`self.running_mean = self.running_mean.detach()`" in fix and "`1.running_mean =" not in fix, fix
    # a named module's attribute too: its own code says `self.`, not the model's path to it
    fix = culprit_fix(Kind.RETAINED_GRAPH, "norm.running_mean", "module_attr", chained=True, has_grad=True,
                      saved_growing=False, same_object=False)
    assert "`self.running_mean = self.running_mean.detach()`" in fix, fix
    fix = culprit_fix(Kind.RETAINED_GRAPH, "stats['loss']", "global", chained=True, has_grad=True,
                      saved_growing=False, same_object=True)
    assert "`stats['loss'] += loss.item()`" in fix, fix


class _AUROCLike(torch.nn.Module):
    """A metric with list states, as torchmetrics keeps them (`add_state(..., default=[])`)."""

    def __init__(self):
        super().__init__()
        self.preds, self.target = [], []

    def update(self, preds, target):
        self.preds.append(preds)
        self.target.append(target)

    def compute(self):
        return torch.cat(self.preds).mean()

    def reset(self):
        self.preds, self.target = [], []


class _Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(64, 64)
        self.train_auroc = _AUROCLike()  # Lightning style: the metric lives on the module

    def forward(self, x):
        return self.net(x)


def test_a_metric_on_the_model_never_reset_is_told_to_reset_not_to_stop_caching():
    torch.manual_seed(0)
    model = _Classifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for step in range(40):
            out, _ = _step(model, opt)
            model.train_auroc.update(out.detach().softmax(-1), torch.zeros(32))
            if step % 10 == 9:
                model.train_auroc.compute()  # the epoch's value; no reset() after it
    top = tracker.report().suspects[0]
    assert top.location == "train_auroc.preds" and top.kind.value == "surviving_tensors", str(tracker.report())
    assert "call `train_auroc.reset()` after `train_auroc.compute()`" in top.fix, top.fix
    assert "the metric state train_auroc.preds holds" in top.evidence[0]


def test_a_metric_module_outside_the_model_is_a_metric_state_too():
    # torchmetrics' Metric in a variable of the loop, not on the model: its list states get the
    # metric's fix as on the model (the module walk told metrics apart only on the model)
    model, opt = _model_and_optimizer()
    metric = _AUROCLike()
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(40):
            out, _ = _step(model, opt)
            metric.update(out.detach(), torch.zeros(32))
    top = tracker.report().suspects[0]
    assert top.location == "metric.preds", str(tracker.report())
    assert "call `metric.reset()` after `metric.compute()`" in top.fix, top.fix


def test_a_metric_given_predictions_with_their_graph_is_told_to_get_detached_ones():
    # torchmetrics' update runs under no_grad and stores a view of what it is given: the graph is
    # kept through the view's base, and the metric is told to get detached tensors
    model, opt = _model_and_optimizer()
    metric = _AUROCLike()
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(40):
            out, _ = _step(model, opt)
            probs = out.softmax(-1)
            with torch.no_grad():
                metric.update(probs.reshape(32, -1), torch.zeros(32))
    top = tracker.report().suspects[0]
    assert (top.kind.value, top.location) == ("retained_graph", "metric.preds"), str(tracker.report())
    assert "`metric.update(preds.detach(), target)`" in top.fix and "`metric.reset()`" in top.fix, top.fix


class _IgniteLikeAccuracy:
    """A metric that is no module (ignite's Metric): update, compute, reset."""

    def __init__(self):
        self.preds = []

    def update(self, preds):
        self.preds.append(preds)

    def compute(self):
        return torch.cat(self.preds).mean()

    def reset(self):
        self.preds = []


def test_a_metric_that_is_no_module_is_a_metric_state_too():
    model, opt = _model_and_optimizer()
    accuracy = _IgniteLikeAccuracy()
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(40):
            out, _ = _step(model, opt)
            accuracy.update(out.detach())
    top = tracker.report().suspects[0]
    assert top.location == "accuracy.preds", str(tracker.report())
    assert "call `accuracy.reset()` after `accuracy.compute()`" in top.fix, top.fix


_MINER_SCRIPT = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


class Miner:
    def __init__(self):
        self.loss_by_sample = {}

    def record(self, step, per_sample):
        for i in range(len(per_sample)):
            self.loss_by_sample[step * 128 + i] = per_sample[i]


def main():
    miner = Miner()
    for step in range(50):
        per_sample = model(torch.randn(128, 64)).pow(2).mean(1)
        opt.zero_grad()
        per_sample.mean().backward()
        opt.step()
        miner.record(step, per_sample)


main()
"""


def test_small_views_with_their_graphs_explain_the_heap_they_grow(tmp_path):
    # per-sample losses kept by sample id: 0-d views, each with its own grad_fn, whose data is 4 B
    # each and whose objects and nodes about 1 KB. Under `memleak run` the holder once showed no
    # bytes per step and explained a third of the heap's growth ("look for a second cause")
    from tests.helpers import memleak_in_process

    script = tmp_path / "mine.py"
    script.write_text(_MINER_SCRIPT)
    res = memleak_in_process("run", "--out", tmp_path / "out", script)
    assert res.returncode == 0, res.stderr
    report = memleak.analyze(memleak.load(tmp_path / "out" / "run.jsonl"))
    top = report.suspects[0]
    assert top.location == "miner.loss_by_sample", str(report)
    assert not any("second cause" in e for s in report.suspects for e in s.evidence), str(report)
    assert top.bytes_per_step > 64 * 1024, str(report)  # 128 views a step, about 1 KB each on the heap



ROLLOUT = """
import torch
from torch import nn
from torch.distributions import Categorical
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
class Rollout:
    def __init__(self):
        self.dists = []
buf = Rollout()
for step in range(60):
    x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))
    dist = Categorical(logits=model(x))
    loss = -dist.log_prob(y).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    buf.dists.append(dist)  # kept for an entropy bonus later
"""


def test_objects_in_a_long_list_past_its_sampled_ends_are_no_second_suspect(tmp_path):
    # the walk samples a long list's ends; the distributions in between are named by what refers
    # to their tensors (`Categorical.logits`): the same cause as the list, not a second one
    from helpers import memleak_in_process

    (tmp_path / "rollout.py").write_text(ROLLOUT)
    assert memleak_in_process("run", "--out", tmp_path / "out", tmp_path / "rollout.py").returncode == 0
    suspects = memleak.analyze(memleak.load(tmp_path / "out")).suspects
    assert suspects[0].location == "buf.dists"
    assert [s.location for s in suspects if s.kind in ("surviving_tensors", "retained_graph", "cached_tensor")] == [
        "buf.dists"
    ]


def test_tensors_chained_through_an_attribute_of_a_tensor_are_named_by_the_variable():
    import gc

    model, opt = _model_and_optimizer()
    plain = [torch.randn(4)]  # a tensor with no attributes: the walk must not give it a __dict__
    last = None
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(30):
            out, _ = _step(model, opt)
            out.prev = last  # debugging: each output linked to the one before
            last = out
    top = tracker.report().suspects[0]
    assert top.location == "last"
    assert "one more each step" in top.evidence[0], top.evidence[0]
    assert not any(type(r) is dict for r in gc.get_referents(plain[0]))


def test_a_holder_whose_tensors_carry_graphs_is_told_to_detach_or_make_them_under_no_grad():
    from memleak.detect.culprit_fixes import culprit_fix

    kept = Kind.SURVIVING_TENSORS
    fix = culprit_fix(kept, "all_scores", "global", chained=False, has_grad=True, saved_growing=False)
    assert "`.detach()` them" in fix and "torch.no_grad()" in fix
    plain = culprit_fix(kept, "all_scores", "global", chained=False, has_grad=False, saved_growing=False)
    assert "torch.no_grad()" not in plain


_CACHED_ERROR = RuntimeError("an optional kernel failed to build")


def _fused(x):
    raise _CACHED_ERROR  # the same instance each call: each raise adds its frames to its traceback


def test_an_exception_raised_again_each_step_is_named_by_what_keeps_it():
    """A cached error re-raised on every call (ipython #8017, cpython #90873): its traceback gains the
    frames of each raise, each with its locals; the walk samples the long traceback at both ends."""
    _CACHED_ERROR.__traceback__ = None
    model, opt = _model_and_optimizer()
    try:
        with memleak.track(model, optimizer=opt, level="full") as tracker:
            for _ in range(30):
                x = torch.randn(32, 64) * 2
                try:
                    _fused(x)
                except RuntimeError:
                    pass
                _step(model, opt)
                tracker.step()
    finally:
        _CACHED_ERROR.__traceback__ = None
    report = tracker.report()
    assert report.verdict == "leak" and report.suspects[0].location == "_CACHED_ERROR", str(report)
