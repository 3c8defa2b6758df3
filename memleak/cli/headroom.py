"""`memleak headroom`: the largest batch that fits, from peaks given on the command line."""

from __future__ import annotations

import argparse
import json

from ..errors import UsageError
from ..units import parse_bytes
from .args import positive_int, share


def _parse_peaks(text: str) -> dict[int, float]:
    from ..planning import parse_batch  # imports torch: only when this subcommand runs

    peaks: dict[int, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        bs, sep, size = part.partition("=")
        if not sep:
            raise UsageError(f"--peaks takes BATCH=SIZE pairs separated by commas (8=1.2GiB,16=2.1GiB), not {part!r}")
        peaks[parse_batch(bs.strip())] = parse_bytes(size)
    return peaks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Predict the largest batch size that fits from peaks measured at two or more batch "
        "sizes (peak = a + b x batch), and the gradient-accumulation steps for a target batch."
    )
    parser.add_argument(
        "--peaks",
        required=True,
        metavar="B=SIZE,...",
        help="peak memory at each batch size, e.g. 8=1.2GiB,16=2.1GiB (binary units; plain bytes too)",
    )
    parser.add_argument(
        "--capacity",
        help="memory the peak must fit in, e.g. 80GiB (default: this machine's GPU, or its RAM without one)",
    )
    parser.add_argument("--margin", type=share, default=0.1, help="safety share kept free (default: %(default)s)")
    parser.add_argument("--target-batch", type=positive_int, help="effective batch to reach with gradient accumulation")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def main(args: argparse.Namespace) -> int:
    from ..planning import headroom

    result = headroom(
        peaks=_parse_peaks(args.peaks), capacity=args.capacity, margin=args.margin, target_batch=args.target_batch
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result)
    return 0
