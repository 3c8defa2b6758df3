import faulthandler
import os
import signal
import sys

import pytest
import torch

# One intra-op thread, here and in the subprocesses tests start: on a 2-core CI
# machine more threads only contend, and results do not depend on the count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


def pytest_configure(config):
    """One garbage collection, not five, before pytest's last look for unraisable exceptions at
    the end of each process (as pytester's in-process runs do): a full collection costs a third
    of a second in a worker that has imported torch, and nothing here needs five.

    Also keeps a copy of stderr as it is now, between pytest's captures, for the stacks of a test
    that runs too long (pytest_runtest_protocol)."""
    _stderr.append(os.fdopen(os.dup(sys.__stderr__.fileno()), "w"))
    try:
        from _pytest.unraisableexception import gc_collect_iterations_key
    except ImportError:  # a pytest without it: its own default
        return
    config.stash[gc_collect_iterations_key] = 1


def pytest_unconfigure(config):
    for stream in _stderr:
        stream.close()
    _stderr.clear()


# A test that runs longer than this fails with every thread's stack printed, so that a hang (a
# deadlock, a child process that never exits) fails that test instead of holding CI until its
# own limit. The slowest test takes about 40 s on a 2-core machine.
TEST_LIMIT_S = float(os.environ.get("MEMLEAK_TEST_LIMIT_S", "300"))
_GRACE_S = TEST_LIMIT_S / 5  # for the signal to end it first


_stderr: list = []  # the process's stderr, which pytest does not capture (pytest_configure)


def _too_long(signum, frame):
    faulthandler.dump_traceback(file=_stderr[0], all_threads=True)
    raise TimeoutError(f"the test ran past {TEST_LIMIT_S:.0f} s (tests/conftest.py: TEST_LIMIT_S); stacks on stderr")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A timer signal raises in the test; if that cannot end it (a deadlock in C holding the GIL),
    faulthandler's timer, a C thread, ends the process a minute later: under -n, xdist reports
    the test failed and starts a new worker."""
    previous = signal.signal(signal.SIGALRM, _too_long)
    signal.setitimer(signal.ITIMER_REAL, TEST_LIMIT_S)
    faulthandler.dump_traceback_later(TEST_LIMIT_S + _GRACE_S, exit=True, file=_stderr[0])
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()


def pytest_itemcollected(item):
    """Under `-n` (setup.cfg: --dist loadgroup), the tests of a module that share a module-scoped
    fixture (a recorded run, a spawn, a fit) go to one worker, which builds it once; split
    across workers, each would build it. Marked as each test is collected: xdist reads the groups
    in its own pytest_collection_modifyitems, and the order of that hook's implementations is not
    one to rely on (with pytest 9.2 xdist's ran first, and every group was ignored)."""
    if item.get_closest_marker("xdist_group"):
        return  # the module chose its group (helpers.needs)
    defs = getattr(item, "_fixtureinfo", None)
    shared = defs is not None and any(d.scope == "module" for fds in defs.name2fixturedefs.values() for d in fds)
    if shared:
        item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture
def pytester(request):
    """pytester, with torch's dynamo imported before it takes its snapshot of sys.modules: an
    in-process session takes out what it imported, and imported there first (optimizer.step()
    imports it), dynamo would be imported again later in the worker and its operator library
    registered twice, failing every later test there that touches dynamo. memleak's own modules
    likewise: imported first in there, they would be taken out and imported again later, and a
    module kept from before would then hold the first copy's classes (an `except Unavailable`
    that no longer matches the probe's `Unavailable` fails every later tracker in that worker)."""
    import importlib
    import pkgutil

    import torch._dynamo  # noqa: F401

    import memleak

    for mod in pkgutil.walk_packages(memleak.__path__, "memleak."):
        # not the integrations with optional frameworks (Lightning, transformers: heavy imports)
        if mod.name != "memleak.__main__" and (
            not mod.name.startswith("memleak.integrations.") or mod.name == "memleak.integrations.pytest_plugin"
        ):
            importlib.import_module(mod.name)
    return request.getfixturevalue("pytester")


# Tests whose imports stay in the worker for the rest of its life: inductor, transformers,
# Lightning, torch.distributed add 100k to 300k objects, and every full gc.collect() and tensor
# census after them (memleak takes both) walks those too. Run last, the rest run in a smaller
# process. xdist hands out groups in collection order.
HEAVY_MODULES = ("stacks/test_compile.py", "stacks/test_compile_ddp.py", "stacks/test_ddp_fsdp2.py", "test_compiled.py")
HEAVY_GROUPS = ("transformers", "lightning")


def _heavy(item) -> bool:
    group = item.get_closest_marker("xdist_group")
    if group is not None and group.args and group.args[0] in HEAVY_GROUPS:
        return True
    return item.nodeid.split("::")[0].endswith(HEAVY_MODULES)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_heavy)  # stable: each part keeps its order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def _process_wide_state() -> dict:
    """What a test could leave installed for the tests after it in the same worker: modes,
    saved-tensor hooks, global module and optimizer hooks (memleak installs each of these)."""
    from torch.nn.modules import module as module_hooks
    from torch.optim import optimizer as optimizer_hooks

    return {
        "TorchFunctionMode": torch._C._len_torch_function_stack(),
        "TorchDispatchMode": torch._C._len_torch_dispatch_stack(),
        "saved-tensor hooks": torch._C._autograd._top_saved_tensors_default_hooks(False) is not None,
        "global module hooks": sum(len(h) for h in (module_hooks._global_forward_pre_hooks,
                                                    module_hooks._global_forward_hooks,
                                                    module_hooks._global_backward_hooks)),
        "global optimizer hooks": len(optimizer_hooks._global_optimizer_pre_hooks)
        + len(optimizer_hooks._global_optimizer_post_hooks),
    }


@pytest.fixture(autouse=True)
def nothing_left_installed():
    """A test that leaves a mode or a hook installed errors here, by name, and takes it off: left,
    it changes every later test in its worker (one did: a TorchFunctionMode left by one test failed
    tests/stacks/test_compile.py's check that memleak leaves nothing, in another module)."""
    before = _process_wide_state()
    yield
    after = _process_wide_state()
    left = {k: (before[k], after[k]) for k in before if after[k] != before[k]}
    if not left:
        return
    while torch._C._len_torch_function_stack() > before["TorchFunctionMode"]:
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack() > before["TorchDispatchMode"]:
        torch._C._pop_torch_dispatch_stack()
    pytest.fail(f"the test left installed: {left} (before, after)")


@pytest.fixture
def heap_read_every_step(monkeypatch):
    """The C heap read at every step end, however dear: for tests about what memleak makes of a
    whole heap series (the live check, auto's windows), not about the read budget (test_heap_reads).
    A test worker's heap, fragmented by a thousand tests before, made a read cost up to 19 ms, so
    after the dense steps the heap was read every 16th step only (CI)."""
    from memleak.recorder import heap_reads

    monkeypatch.setattr(heap_reads, "CPU_READ_FREE", float("inf"))


@pytest.fixture
def module_reads_affordable(monkeypatch):
    """Reads of the memory counter around each module call always judged affordable: for tests
    about what a measured step records, not whether it may be measured. A test worker's
    fragmented heap made them too dear (19 ms a read), and no step of a 30-step run was measured
    (CI). The budget has its own test (test_modules.py)."""
    from memleak.probes import modules

    monkeypatch.setattr(modules, "reads_affordable", lambda read, reads, plain: (True, 0.0))
