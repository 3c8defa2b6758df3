"""A plain PyTorch training script with one of the most common leaks: every step's
logits are kept for an end-of-run accuracy without `.detach()`, so each step's
output (and its autograd graph) stays alive.

It knows nothing about memleak. Find the leak without changing it:

    memleak run examples/leaky_train.py --steps 60

and check the fix:

    memleak run examples/leaky_train.py --steps 60 --fixed
"""
import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--fixed", action="store_true", help="keep only the predicted classes (the fix)")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 1000)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    targets = torch.randint(0, 1000, (args.batch,), device=device)
    kept_logits = []
    for step in range(args.steps):
        x = torch.randn(args.batch, 256, device=device)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if args.fixed:
            kept_logits.append(logits.detach().argmax(1))  # a few bytes, no graph
        else:
            kept_logits.append(logits)  # the leak: 512 KiB of logits and their graph, every step
    accuracy = torch.cat([k if k.dim() == 1 else k.argmax(1) for k in kept_logits]).eq(
        targets.repeat(args.steps)).float().mean()
    print(f"trained {args.steps} steps; final loss {loss.item():.3f}, train accuracy {accuracy.item():.3f}")


if __name__ == "__main__":
    main()
