"""A training-step helper module, as projects keep in utils.py/engine.py (used by leak_step_fn_global)."""
from torch import nn

# Hard examples kept for a later "replay" pass that never comes: grows every step.
HARD_EXAMPLES = []


def train_step(model, opt, x, y):
    logits = model(x)
    per_example = nn.functional.cross_entropy(logits, y, reduction="none")
    loss = per_example.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    hard = per_example.detach().topk(8).indices
    HARD_EXAMPLES.append(x[hard])  # the leak: never replayed nor trimmed
    return loss.item()
