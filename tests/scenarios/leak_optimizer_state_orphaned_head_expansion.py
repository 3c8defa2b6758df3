"""Sequential fine-tuning on a stream of tasks, each with its own label set: at every new task the
classifier head is rebuilt (``model.reset_head()``) and swapped into the optimizer by overwriting
its param group's ``params`` list, keeping the backbone's Adam moments. The param group now holds
only the new head, but ``opt.state`` is a dict keyed by the parameter tensors themselves: the old
head's ``Parameter`` stays alive as a key together with its Adam ``exp_avg``/``exp_avg_sq``, for
every head ever replaced. The model itself keeps a constant size; growth comes in steps, three
copies of a head per task, a task every 3 training steps.

Real case: nerfstudio-project/gsplat https://github.com/nerfstudio-project/gsplat/pull/931 (a
replaced ``Parameter`` stays alive through "``optimizer.state`` key, ``param_groups["params"]``")
and deepspeedai/DeepSpeed https://github.com/deepspeedai/DeepSpeed/issues/6729 (layers switched
out of the optimizer: "the states of the body layers should be deleted" but memory is not released).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "opt.state", "top": 1}
TASK_STEPS = 3
FEAT = 512
CLASSES = 200


class TaskNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(64, FEAT), nn.ReLU())
        self.head = nn.Linear(FEAT, CLASSES)

    def reset_head(self):
        self.head = nn.Linear(FEAT, CLASSES)

    def forward(self, x):
        return self.head(self.backbone(x))


def run(tracker_factory, steps=30):
    g = seed(5103)
    model = TaskNet()
    opt = torch.optim.Adam([{"params": model.backbone.parameters()}, {"params": model.head.parameters()}], lr=1e-3)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            if step and step % TASK_STEPS == 0:  # new task, new label set: a fresh head
                model.reset_head()
                opt.param_groups[1]["params"] = list(model.head.parameters())  # the old head's state stays in opt.state
            x = torch.randn(64, 64, generator=g)
            y = torch.randint(0, CLASSES, (64,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
