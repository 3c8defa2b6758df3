"""A backward hook on the embedding layer appends the gradient it sees to a module-level list, and
the loss is back-propagated with ``create_graph=True`` (an input-gradient penalty): each kept
gradient carries the double-backward graph, which saved that step's activations.

Real case: https://github.com/pytorch/pytorch/issues/4661 (comment by IsThatYou, 2020-03-07:
"This is achieved by setting a hook at the embedding layer, and then call either
``.backward(create_graph=True)`` or ``autograd.grad(embedding_layer, loss, create_graph=True)``.
Then the gradients would be captured by the hook ... However, this incurs a memory leak of the
GPU"; the minimized code keeps them in ``embedding_gradient = []``). Here the hook is a full
backward hook on an ``nn.Embedding`` under a small classifier, the parameters' ``.grad`` are
reset to None each step (so their own create_graph cycles are broken, as the warning advises),
and the list is never cleared. The penalty's backward pass runs through each kept gradient's graph
and frees the tensors that graph saved, so what stays is the gradients themselves (two a step: the
hook fires again in the penalty's backward) and the graphs' emptied nodes: surviving tensors.
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "embedding_gradient", "top": 1}

embedding_gradient = []


def hook_layers(module, grad_in, grad_out):
    embedding_gradient.append(grad_out[0])  # the leak: kept with its graph (create_graph=True)


class TokenClassifier(nn.Module):
    def __init__(self, vocab=200, d=DIM, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.fc = nn.Linear(d, 96)
        self.head = nn.Linear(96, classes)

    def forward(self, tokens):
        h = self.embed(tokens)
        return self.head(torch.tanh(self.fc(h)).mean(1))


def run(tracker_factory, steps=30):
    g = seed(47)
    model = TokenClassifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model.embed.register_full_backward_hook(hook_layers)
    embedding_gradient.clear()
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            tokens = torch.randint(0, 200, (32, 24), generator=g)
            y = torch.randint(0, 4, (32,), generator=g)
            loss = nn.functional.cross_entropy(model(tokens), y)
            opt.zero_grad(set_to_none=True)
            loss.backward(create_graph=True)
            penalty = embedding_gradient[-1].pow(2).sum()  # backward through the hook's gradient
            penalty.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            tracker.step()
