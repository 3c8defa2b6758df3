"""A small view stored in a holder keeps its whole base alive: one suspect at the holder, whose fix says so."""
import torch

import memleak


def test_a_view_and_its_base_are_one_suspect_at_the_holder():
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    firsts = []
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(40):
            big = torch.randn(256, 1024)  # 1 MiB, made on its own line
            model(torch.randn(4, 16)).sum().backward()
            opt.step()
            firsts.append(big[0])  # 4 KiB view, 1 MiB kept
    leaks = [s for s in tracker.report().suspects if s.leak]
    assert [s.location for s in leaks] == ["firsts"], [(s.location, s.kind) for s in leaks]
    assert leaks[0].bytes_per_step > 900 * 1024  # the bases' bytes, not the views'
    assert "`t[0].clone()`" in leaks[0].fix
    assert any("views of larger tensors" in e for e in leaks[0].evidence)


def test_predictions_extended_onto_a_list_are_told_to_store_numbers():
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    preds = []
    with memleak.track(model, optimizer=opt) as tracker:
        for _ in range(40):
            out = model(torch.randn(64, 16))
            out.sum().backward()
            opt.step()
            preds.extend(out.argmax(-1))  # 64 0-d views a step, one per row
    top = tracker.report().suspects[0]
    assert top.location == "preds" and "`.extend(t.tolist())`" in top.fix, str(tracker.report())
