"""A sparse tensor has no storage of its own: its bytes are its indices' and values'. A list that
keeps a sparse matrix a step is named with what each one holds, not 0 bytes."""
import torch

import memleak
from memleak.probes.identity import tensor_nbytes

from tests.helpers import model_and_optimizer


def test_a_sparse_tensor_counts_its_indices_and_values():
    idx, val = torch.tensor([[0, 1, 2], [2, 0, 1]]), torch.randn(3)
    coo = torch.sparse_coo_tensor(idx, val, (3, 3))
    assert tensor_nbytes(coo)[1] == idx.nbytes + val.nbytes
    csr = coo.to_sparse_csr()
    # its parts may be views of larger storages, which they keep alive
    assert tensor_nbytes(csr)[1] >= sum(t.nbytes for t in (csr.crow_indices(), csr.col_indices(), csr.values()))
    assert tensor_nbytes(torch.randn(4))[1] == 16  # a dense tensor: its storage


def test_a_list_of_sparse_matrices_is_named_with_their_bytes():
    model, opt = model_and_optimizer()
    kept = []
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(30):
            loss = model(torch.randn(32, 64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            idx, val = torch.randint(0, 4096, (2, 4096)), torch.randn(4096)
            kept.append(torch.sparse_coo_tensor(idx, val, (4096, 4096)))  # 80 KiB of indices and values
            tracker.step()
    report = tracker.report()
    top = report.suspects[0]
    assert top.location == "kept", str(report)
    assert 0.9 * 80 * 1024 <= top.bytes_per_step <= 1.2 * 80 * 1024, str(report)
