"""The holder pictures draw the holder a report names first, also where only the survivor checks
named it (a generator's local the walks never reach): over those checks, labelled as a sample."""
import torch

import memleak
from memleak.report import holder_lines as H
from memleak.report.figures import holders_figure
from memleak.report.plots import plot_holders

from tests.helpers import model_and_optimizer

STEPS = 30
HELD = "kept (local of generator _batches)"


def _batches(n):
    kept = []
    g = torch.Generator().manual_seed(3)
    for _ in range(n):
        x = torch.randn(64, 64, generator=g)
        kept.append(x)  # meant for a second pass
        yield x


def _report():
    model, opt = model_and_optimizer()
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for x in _batches(STEPS):
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
    return tracker.report()


def test_a_holder_only_the_survivor_checks_named_is_drawn_over_them():
    report = _report()
    assert report.suspects and report.suspects[0].location == HELD, str(report)
    run = report.run
    assert HELD in H.survivor_holders(run)
    assert H.top_holders(run, report.suspects)[0] == HELD
    line = H.holder_series(run, [HELD])[HELD]
    assert list(line["step"]) == [r.step for r in run.births]
    assert line["bytes"].is_monotonic_increasing and line["bytes"].iloc[-1] >= 8 * 64 * 64 * 4  # more alive each check
    assert line["nodes"].isna().all()  # not measured: no line drawn, not a zero
    assert HELD not in H.holder_series(run, [HELD], births=False)  # the stacked memory picture leaves it out

    fig = plot_holders(run, report.suspects)
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert HELD + H.SAMPLED in labels, labels
    assert "survivor check" in fig.axes[0].get_title(loc="left")


def test_the_html_figure_labels_it_too():
    report = _report()
    fig = holders_figure(report)
    assert any(t.name == HELD + H.SAMPLED for t in fig.data)
