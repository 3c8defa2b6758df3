import os

import pytest
import torch

# One intra-op thread, here and in the subprocesses tests start: on a 2-core CI
# machine more threads only contend, and results do not depend on the count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    _keep_shared_fixtures_on_one_worker(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def _keep_shared_fixtures_on_one_worker(items):
    """Under `-n` (setup.cfg: --dist loadgroup), the tests of a module that share a module-scoped
    fixture (a recorded run, a spawn, a fit) go to one worker, which builds it once; split
    across workers, each would build it."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue  # the module chose its group (helpers.needs)
        defs = getattr(item, "_fixtureinfo", None)
        shared = defs is not None and any(
            d.scope == "module" for fds in defs.name2fixturedefs.values() for d in fds
        )
        if shared:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
