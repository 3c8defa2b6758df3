import os

import pytest
import torch

# One intra-op thread, here and in the subprocesses tests start: on a 2-core CI
# machine more threads only contend, and results do not depend on the count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
