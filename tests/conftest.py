import os

import pytest
import torch

# One intra-op thread, here and in the subprocesses tests start: on a 2-core CI
# machine more threads only contend, and results do not depend on the count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


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


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
