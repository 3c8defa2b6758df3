"""The GPU acceptance run (benchmarks/gpu_acceptance.py): every CUDA path memleak has, run
on a real device in one call, with its results in one JSON file and the fixtures the CPU
tests read (tests/data/gpu/). See docs/gpu.md.

Each part is a module with ``run(ctx) -> dict``; `harness` runs them one by one, each
with its own time cap, and records what each found, also when one fails.
"""
