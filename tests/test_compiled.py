"""A compiled model's run file is readable: what probes say while starting follows the header."""
import json

import pytest
import torch

import memleak


@pytest.mark.parametrize("level", ["modules", "full"])
def test_a_compiled_models_run_loads_and_reports(tmp_path, level):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    compiled = torch.compile(model, backend="eager")  # the eager backend: a compiled module, compiled fast
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with memleak.track(compiled, optimizer=opt, level=level, out=tmp_path / "run") as tracker:
        for _ in range(6):
            compiled(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
    records = [json.loads(line) for line in (tmp_path / "run" / "run.jsonl").read_text().splitlines()]
    assert records[0]["type"] == "header"
    assert any(r.get("event") == "probe_limited" for r in records[1:])
    run = memleak.load(tmp_path / "run")
    assert len(run.steps) == 6
    assert tracker.report().verdict.value in ("clean", "inconclusive")
