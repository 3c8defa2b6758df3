"""A CycleGAN-style discriminator history (the ``ReplayBuffer.push_and_pop`` of PyTorch-GAN, batch
size 1) with ``max_size=8``: fakes are pushed without ``detach()``, so each stored image keeps the
generator graph (and saved activations) of the step that made it; once full, each push replaces a
random slot with probability 1/2 and returns the old image. The discriminator is trained on
``fake.detach()``, so no stored graph is ever backpropagated. The pool wastes memory on up to eight
generator graphs, but the count is capped: it fills during the first steps and then stays at eight
graphs, replacing (and freeing) one about every other step. Bounded, not a leak.

Real case: eriklindernoren/PyTorch-GAN https://github.com/eriklindernoren/PyTorch-GAN/issues/71
("push_and_pop(fake_A.detach()) ... the graph should not be retained in the buffer"), with the pool's
size cap working (the unbounded variant is ``leak_gan_image_pool_unbounded``).
"""
import random

import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}


class ReplayBuffer:
    def __init__(self, max_size=8, rng=None):
        self.max_size = max_size
        self.data = []
        self.rng = rng or random.Random(0)

    def push_and_pop(self, data):
        to_return = []
        for element in data:  # no .data / detach: each element keeps the generator graph
            element = element.unsqueeze(0)
            if len(self.data) < self.max_size:
                self.data.append(element)
                to_return.append(element)
            elif self.rng.uniform(0, 1) > 0.5:
                i = self.rng.randint(0, self.max_size - 1)
                to_return.append(self.data[i].clone())
                self.data[i] = element
            else:
                to_return.append(element)
        return torch.cat(to_return)


def generator():
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.InstanceNorm2d(32), nn.ReLU(),
                         nn.Conv2d(32, 32, 3, padding=1), nn.InstanceNorm2d(32), nn.ReLU(),
                         nn.Conv2d(32, 3, 3, padding=1), nn.Tanh())


def discriminator():
    return nn.Sequential(nn.Conv2d(3, 32, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
                         nn.Conv2d(32, 64, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
                         nn.Conv2d(64, 1, 3, padding=1))


def run(tracker_factory, steps=30):
    g = seed(71)
    G, D = generator(), discriminator()
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    fake_buffer = ReplayBuffer(8, random.Random(71))
    mse = nn.MSELoss()
    with tracker_factory(G, optimizer=opt_g) as tracker:
        for _ in range(steps):
            real_a = torch.rand(1, 3, 64, 64, generator=g) * 2 - 1
            real_b = torch.rand(1, 3, 64, 64, generator=g) * 2 - 1
            fake_b = G(real_a)
            pred = D(fake_b)
            loss_g = mse(pred, torch.ones_like(pred)) + 10 * nn.functional.l1_loss(fake_b, real_a)
            opt_g.zero_grad()
            loss_g.backward()
            opt_g.step()
            fake_hist = fake_buffer.push_and_pop(fake_b)
            p_real, p_fake = D(real_b), D(fake_hist.detach())
            loss_d = 0.5 * (mse(p_real, torch.ones_like(p_real)) + mse(p_fake, torch.zeros_like(p_fake)))
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            tracker.step()
