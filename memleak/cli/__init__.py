"""The `memleak` command: demo, report, run, headroom."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from ..errors import MemleakError, UsageError
from ..schema import DEFAULT_LEVEL, LEVELS
from .args import positive_int

# Subcommands whose code lives beside what they drive: module -> (name, help)
_EXTERNAL = {
    "memleak.integrations.zero_code": (
        "run",
        "run a script unchanged and report its memory (python -m memleak run ...)",
    ),
    "memleak.cli.headroom": ("headroom", "predict the largest batch size that fits from measured peaks"),
}


def _demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    report = run_demo(out=args.out, steps=args.steps, device=args.device, level=args.level)
    print(report)
    print(f"\nrun file, report.txt, report.html, findings.json and plots written to {args.out}/")
    return 0


def _report(args: argparse.Namespace) -> int:
    from ..analysis import analyze
    from ..io import load

    report = analyze(load(args.path, errors="skip" if args.skip_broken else "raise"))
    print(report)
    if args.output:
        paths = report.save(args.output)
        print(f"\nwritten: {', '.join(str(p) for p in paths)}")
    page = _write_html(report, args)
    if page is not None and args.open:
        import webbrowser

        webbrowser.open(page.resolve().as_uri())
    return 1 if (args.check and report.leak) else 0


def _write_html(report, args: argparse.Namespace) -> Path | None:
    """The page --html asks for; with --open alone, the one -o wrote, else one in a new temporary folder."""
    if args.html:
        page = Path(args.html)
        if page.is_dir():
            raise UsageError(f"{page}: is a folder; --html takes the path of the page to write")
    elif args.open and args.output:
        return Path(args.output) / "report.html"
    elif args.open:
        import tempfile

        page = Path(tempfile.mkdtemp(prefix="memleak-")) / "report.html"
    else:
        return None
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(report.to_html(), encoding="utf-8")
    print(f"\nHTML report written to {page}")
    return page


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="memleak", description="Find the cause of GPU memory growth in PyTorch programs."
    )
    parser.add_argument("--version", action="version", version=f"memleak {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="run a small training loop with a planted leak and report it")
    p.add_argument("--out", default="memleak-demo", help="folder for the run and the report (default: %(default)s)")
    p.add_argument("--steps", type=positive_int, default=60, help="iterations to run (default: %(default)s)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when present)")
    p.add_argument("--level", default=DEFAULT_LEVEL, choices=LEVELS)
    p.set_defaults(func=_demo)

    p = sub.add_parser("report", help="analyse a run file, a run folder or a PyTorch memory snapshot pickle")
    p.add_argument("path", help="run file (.jsonl), out= folder, or snapshot .pickle")
    p.add_argument(
        "-o", "--output", help="also write report.txt, report.html, findings.json and PNG plots into this folder"
    )
    p.add_argument("--check", action="store_true", help="exit with status 1 when the verdict is leak")
    p.add_argument("--html", metavar="PAGE", help="write the report as one self-contained HTML page (opens offline)")
    p.add_argument("--open", action="store_true", help="open the HTML page in a web browser")
    p.add_argument(
        "--skip-broken",
        action="store_true",
        help="read around broken lines of a run file (each is noted in the report) instead of stopping at the first",
    )
    p.set_defaults(func=_report)

    for module_name, (name, help_) in _EXTERNAL.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_)
        module.add_arguments(p)
        p.set_defaults(func=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MemleakError as e:
        print(f"memleak: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a folder it may not write, a full disk: the file and the reason
        where = f"{e.filename}: " if e.filename else ""
        print(f"memleak: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
