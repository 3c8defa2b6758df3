"""Host growth that follows new input shapes (detect/new_shapes.py): native code keeps something
per shape it has not seen (oneDNN's primitives on the CPU), and stops once every shape was seen."""
from __future__ import annotations

import pandas as pd
import torch
from torch import nn

import memleak
from memleak.run import Run
from memleak.schema import Kind

STEPS = 30


def _run(shapes: list[str]) -> Run:
    """30 steps of a C heap growing 200 KiB a step, no holder, and module records at steps 1, 3, 7,
    15 and 23 with the model's input shapes `shapes`."""
    steps = pd.DataFrame({"step": range(STEPS), "time": [0.01 * i for i in range(STEPS)],
                          "heap_bytes": [100 * 2**20 + 200 * 1024 * i for i in range(STEPS)]})
    recs = [{"step": s, "modules": [], "input_shape": shape} for s, shape in zip([1, 3, 7, 15, 23], shapes, strict=True)]
    return Run({"device": "cpu", "level": "full"}, steps, records={"modules": recs})


def test_growth_while_most_sampled_inputs_take_a_new_shape_is_no_leak():
    report = memleak.analyze(_run(["16x3x45x45", "16x3x35x35", "16x3x62x62", "16x3x20x20", "16x3x51x51"]))
    assert report.verdict.value == "inconclusive", str(report)
    top = report.suspects[0]
    assert top.kind == Kind.LINEAR_GROWTH and not top.leak and top.confidence < 0.5
    assert any("a shape not seen before on 5 of the 5 sampled steps" in e for e in top.evidence)
    assert "ONEDNN_PRIMITIVE_CACHE_CAPACITY" in top.fix
    verdict = next(line for line in str(report).splitlines() if line.startswith("verdict:"))
    assert "shape not seen before" in verdict and "it stops there" in verdict


def test_the_same_growth_with_one_shape_or_a_few_repeated_is_a_leak():
    for shapes in (["16x3x32x32"] * 5, ["16x3x32x32", "16x3x40x40", "16x3x32x32", "16x3x40x40", "16x3x32x32"]):
        report = memleak.analyze(_run(shapes))
        assert report.verdict.value == "leak", str(report)
        assert report.suspects[0].leak and not any("shape not seen" in e for e in report.suspects[0].evidence)


def test_the_module_probe_records_the_models_input_shape_on_its_detail_steps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    with memleak.track(model, level="full") as tracker:
        for side in (8, 9, 10, 11, 12, 13, 14, 15):
            model(torch.randn(2, 3, side, side)).sum().backward()
            tracker.step()
    shapes = {r.step: r.input_shape for r in tracker.run().module_records}
    assert shapes and all(shape == f"2x3x{8 + step}x{8 + step}" for step, shape in shapes.items()), shapes
