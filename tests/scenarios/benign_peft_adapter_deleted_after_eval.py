"""Sweeping many LoRA adapters over one base model, the right way: each step loads the next adapter
(a new ``lora_A[name]`` / ``lora_B[name]`` pair in every target layer's ``nn.ModuleDict``), scores it
on an evaluation batch without grad, then calls ``delete_adapter(name)``, which removes the pair from
every layer. New parameters appear in the model at every step and the model's module tree changes
at every step, but at most one adapter is loaded at a time: flat memory.

Real case: the answer to huggingface/peft https://github.com/huggingface/peft/issues/738 ("Add a
``PeftModel.delete_adapter(adapter_id)`` method ... so that the adapter's weights can be garbage
collected"; "``delete_adapter(adapter_id)`` is already introduced"), and
https://github.com/huggingface/transformers/pull/34650 ("deleting adapters once loaded").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

D, R, LAYERS = 256, 16, 4


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.ModuleDict()
        self.lora_B = nn.ModuleDict()
        self.active_adapter = None

    def update_layer(self, name, r):
        self.lora_A[name] = nn.Linear(self.base_layer.in_features, r, bias=False)
        self.lora_B[name] = nn.Linear(r, self.base_layer.out_features, bias=False)

    def delete_adapter(self, name):
        del self.lora_A[name]
        del self.lora_B[name]
        if self.active_adapter == name:
            self.active_adapter = None

    def forward(self, x):
        out = self.base_layer(x)
        if self.active_adapter is not None:
            out = out + self.lora_B[self.active_adapter](self.lora_A[self.active_adapter](x))
        return out


class PeftStyleModel(nn.Module):
    def __init__(self, d=D, layers=LAYERS, classes=8):
        super().__init__()
        self.layers = nn.ModuleList(LoraLinear(nn.Linear(d, d)) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def lora_layers(self):
        return [m for m in self.modules() if isinstance(m, LoraLinear)]

    def load_adapter(self, name, state):
        for i, layer in enumerate(self.lora_layers()):
            layer.update_layer(name, R)
            layer.lora_A[name].weight.data.copy_(state[f"{i}.lora_A"])
            layer.lora_B[name].weight.data.copy_(state[f"{i}.lora_B"])

    def set_adapter(self, name):
        for layer in self.lora_layers():
            layer.active_adapter = name

    def delete_adapter(self, name):
        for layer in self.lora_layers():
            layer.delete_adapter(name)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def adapter_state(g, layers=LAYERS, d=D, r=R):
    state = {}
    for i in range(layers):
        state[f"{i}.lora_A"] = torch.randn(r, d, generator=g) * 0.01
        state[f"{i}.lora_B"] = torch.randn(d, r, generator=g) * 0.01
    return state


def run(tracker_factory, steps=30):
    g = seed(739)
    model = PeftStyleModel().eval()
    opt = torch.optim.SGD(model.head.parameters(), lr=0.0)
    scores = {}
    x = torch.randn(64, D, generator=g)
    y = torch.randint(0, 8, (64,), generator=g)
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            name = f"adapter_{step:04d}"
            model.load_adapter(name, adapter_state(g))
            model.set_adapter(name)
            with torch.no_grad():
                scores[name] = (model(x).argmax(-1) == y).float().mean().item()
            model.delete_adapter(name)
            tracker.step()
