"""A bounded pool of views of each step's batch (a GAN's image pool: rows of a batch, replaced at
random once full) keeps more of its bases alive as fewer of its rows share one: its bytes grow for a
long while at a fixed count. They stop at one base a row, so it is no leak; a pool of views of bases
that grow each step has no such bound."""
import random

import torch

import memleak

from tests.helpers import model_and_optimizer


class Pool:
    def __init__(self, max_size):
        self.max_size = max_size  # the bound beside the list (probes/bounds.owner_bound)
        self.images = []
        self.rng = random.Random(0)

    def push(self, batch):
        for row in batch.split(4):  # views of the batch
            if len(self.images) < self.max_size:
                self.images.append(row)
            elif self.rng.random() < 0.25:  # else the row goes by without the pool
                self.images[self.rng.randrange(self.max_size)] = row


def _pooled(steps=60, growing=False):
    model, opt = model_and_optimizer()
    pool = Pool(max_size=96)
    with memleak.track(model, optimizer=opt, level="auto") as tracker:
        for step in range(steps):
            x = torch.randn(32, 64)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            fakes = torch.randn(32 + (16 * step if growing else 0), 64)
            pool.push(fakes[:32] if growing else fakes)
            tracker.step()
    return tracker.report()


def test_a_full_pool_of_views_whose_rows_keep_their_bases_is_no_leak():
    report = _pooled()
    # the heap grows while the pool's rows get bases of their own: explained by the pool, which stops
    assert report.verdict in ("clean", "inconclusive"), str(report)
    assert not any(s.leak for s in report.suspects), str(report)
    pool = next(s for s in report.suspects if s.location == "pool.images")
    assert "views that keep their bases alive, up to 8.0 KiB each" in str(pool), str(report)


def test_a_pool_of_views_of_ever_larger_bases_is_a_leak():
    report = _pooled(growing=True)
    assert report.verdict == "leak", str(report)
    assert report.suspects[0].location == "pool.images", str(report)
