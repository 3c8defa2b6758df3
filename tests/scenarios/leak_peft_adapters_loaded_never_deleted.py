"""Sweeping many LoRA adapters over one base model: each step loads the next adapter's weights into the
model with ``load_adapter(name, state)`` (as ``PeftModel.load_adapter`` does), makes it active, scores
it on an evaluation batch without grad, and moves on. Loading adds a new ``lora_A[name]`` /
``lora_B[name]`` pair to every target layer's ``nn.ModuleDict``; switching the active adapter only
changes which entry the forward uses. Nothing deletes the previous adapters, so every adapter ever
evaluated stays in the model's modules, a rank-16 pair per target layer per step.

Real case: huggingface/peft https://github.com/huggingface/peft/issues/738 ("I am taking advantage of
the small size of a PEFT adapter to quickly evaluate many adapter in succession ... for adapter_in in
adapter_ids: peft_model.load_adapter(...); evaluate(peft_model) ... they are never garbage collected.
A naive implementation of this loop will quickly exhaust your GPU memory"; the answer is
``delete_adapter``).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "cached_tensor", "location": "lora_", "top": 1}

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

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def adapter_state(g, layers=LAYERS, d=D, r=R):
    """What ``safetensors.load_file(adapter_path)`` would hand back for one adapter."""
    state = {}
    for i in range(layers):
        state[f"{i}.lora_A"] = torch.randn(r, d, generator=g) * 0.01
        state[f"{i}.lora_B"] = torch.randn(d, r, generator=g) * 0.01
    return state


def run(tracker_factory, steps=30):
    g = seed(738)
    model = PeftStyleModel().eval()
    opt = torch.optim.SGD(model.head.parameters(), lr=0.0)  # base model frozen; only here for the tracker
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
            # the fix is model.delete_adapter(name) here
            tracker.step()
