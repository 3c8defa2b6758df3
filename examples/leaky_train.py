"""A plain PyTorch training script with one of the most common leaks: every step's
logits are kept in a list for an end-of-run accuracy, so each step's output (and,
as it is not detached, its autograd graph) stays alive. `--fixed` counts the
correct predictions as it goes instead: a number, nothing kept.

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
    parser.add_argument("--fixed", action="store_true", help="count correct predictions as it goes (the fix)")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 1000)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    targets = torch.randint(0, 1000, (args.batch,), device=device)
    kept_logits = []
    correct = 0
    for step in range(args.steps):
        x = torch.randn(args.batch, 256, device=device)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if args.fixed:
            correct += (logits.argmax(1) == targets).sum().item()  # a number: nothing stays alive
        else:
            kept_logits.append(logits)  # the leak: 512 KiB of logits and their graph, every step
    if not args.fixed:
        correct = sum((k.argmax(1) == targets).sum().item() for k in kept_logits)
    accuracy = correct / (args.steps * args.batch)
    print(f"trained {args.steps} steps; final loss {loss.item():.3f}, train accuracy {accuracy:.3f}")

if __name__ == "__main__":
    main()
