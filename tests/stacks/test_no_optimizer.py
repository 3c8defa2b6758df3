"""Loops without an optimizer under `memleak run` (run in this process, as the CLI runs them):
weights updated by hand (PyTorch's word-language-model example does it), and inference only.

With no optimizer step, each backward pass through the model's output ends an iteration; with no
backward pass either, each call of the model does; the report says which. Tracking starts at the
model's second top-level call (the first finds the model), and the iteration a hook saw end last
is not recorded after the script's globals are gone: N loop iterations give N - 2 steps."""
from __future__ import annotations

import json
import textwrap

import pytest
import torch

from memleak.integrations.zero_code import ZeroCodeSession, run_target
from stacks.stack_harness import LEVELS, _global_hooks

STEPS = 30

HAND_SGD = """
import json, sys
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(50, 16), nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 50))
criterion = nn.CrossEntropyLoss()
g = torch.Generator().manual_seed(1)
losses, history = [], []
for step in range({steps}):
    tokens = torch.randint(0, 50, (8, 4), generator=g)
    model.zero_grad()
    loss = criterion(model(tokens), tokens[:, 0])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.1)
    losses.append(loss.item())
    if {leak}:
        history.append(loss)  # the leak: each loss keeps its graph
    if step % 10 == 9:
        with torch.no_grad():  # an evaluation call: not an iteration of its own
            model(tokens)
json.dump(losses, open(sys.argv[1], "w"))
"""

INFERENCE = """
import json, sys
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 8))
g = torch.Generator().manual_seed(1)
outputs, sums = [], []
for step in range({steps}):
    x = torch.randn(64, 16, generator=g)
    if {leak}:
        outputs.append(model(x))  # the leak: outputs kept with their graphs (no torch.no_grad)
        sums.append(outputs[-1].sum().item())
    else:
        with torch.no_grad():
            sums.append(model(x).sum().item())
json.dump(sums, open(sys.argv[1], "w"))
"""


def _run(tmp_path, source, level, leak, tracked=True):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source.format(steps=STEPS, leak=leak)))
    out = tmp_path / ("tracked.json" if tracked else "plain.json")
    session = ZeroCodeSession(tmp_path / "run", level=level).install() if tracked else None
    try:
        status, error = run_target(str(script), [str(out)])
    finally:
        if session is not None:
            session.close()
    assert (status, error) == (0, None)
    return json.loads(out.read_text()), session


@pytest.mark.parametrize("level", LEVELS)
# the hand-SGD loop's evaluation call after its last iteration records that iteration's end
@pytest.mark.parametrize(("source", "boundary", "steps"), [(HAND_SGD, "backward", STEPS - 1),
                                                           (INFERENCE, "forward", STEPS - 2)],
                         ids=["hand-sgd", "inference"])
def test_iterations_marked_same_results_nothing_left(tmp_path, source, boundary, steps, level):
    plain, _ = _run(tmp_path, source, level, False, tracked=False)
    before = _global_hooks()
    results, session = _run(tmp_path, source, level, False)
    assert results == plain  # bit-identical losses (or outputs)
    assert _global_hooks() == before
    assert torch._C._len_torch_function_stack() == 0
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert session.steps == steps
    run = session.tracker.run()
    assert [e["kind"] for e in run.events if e["event"] == "boundary"] == [boundary]
    report = str(session.tracker.report())
    assert {"backward": "each backward pass", "forward": "each call of the model"}[boundary] in report
    if level == "full":
        assert session.tracker.report().verdict != "leak", report


@pytest.mark.parametrize(("source", "holder"), [(HAND_SGD, "history"), (INFERENCE, "outputs")],
                         ids=["hand-sgd", "inference"])
def test_a_planted_leak_is_named(tmp_path, source, holder):
    _, session = _run(tmp_path, source, "full", True)
    report = session.tracker.report()
    assert report.verdict == "leak", str(report)
    assert holder in report.suspects[0].location, str(report)


def test_an_optimizer_seen_later_takes_over(tmp_path):
    """Gradient accumulation: two backward passes come before the first optimizer step, so tracking
    starts without one; from that step on, each optimizer step ends an iteration."""
    source = """
    import json, sys
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for step in range({steps}):
        for micro in range(4):
            loss = model(torch.randn(8, 16)).pow(2).mean() / 4
            loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    json.dump(losses, open(sys.argv[1], "w"))
    """
    _, session = _run(tmp_path, source, "counters", None)
    kinds = [(e["kind"], e["step"]) for e in session.tracker.run().events if e["event"] == "boundary"]
    # micro-batches 2 and 3 of the first step ended two iterations before the first step was seen
    assert kinds == [("backward", 0), ("optimizer", 2)]
    assert session.steps == STEPS + 2
