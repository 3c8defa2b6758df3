"""Host memory that grows while the model's input keeps taking new shapes: native code keeps
something per shape it has not seen before (oneDNN's convolution primitives on the CPU, cuBLAS
plans and cuDNN's autotuned algorithms beside a GPU, kernels compiled per shape), and stops
growing once every shape has been seen. Multi-scale training with a conv net on the CPU grows the
C heap by hundreds of KiB a step for as long as new image sizes appear, keeping no tensor.

The module probe writes the shape of the model's first input on each detail step
(``modules`` records, ``input_shape``); when most of those samples brought a shape not seen before,
host growth that no culprit explains is not called a leak, and says why (`suspects.rank`)."""

from __future__ import annotations

from ..run import Run
from ..schema import Suspect
from .thresholds import not_a_leak

#: Samples whose input shape is new must be at least this many...
MIN_NEW_SHAPES = 3
#: ...and this share of the samples that recorded a shape.
NEW_SHAPE_SHARE = 0.6
FIX = (
    "Nothing of yours was seen to keep memory: this growth follows the new input shapes. Run longer to see "
    "it level off once every shape has been seen, or feed a few fixed shapes (bucket or pad the inputs to a "
    "small set of sizes); on the CPU, ONEDNN_PRIMITIVE_CACHE_CAPACITY bounds oneDNN's cache (1024 shapes by "
    "default). A growth that goes on after the shapes repeat is a leak."
)


def new_shapes(run: Run) -> tuple[int, int, list[str]]:
    """(samples whose input shape was new, samples with a shape, a few of the shapes)."""
    seen: list[str] = []
    sampled = 0
    for rec in run.module_records:
        shape = rec.input_shape
        if shape:
            sampled += 1
            if shape not in seen:
                seen.append(shape)
    return len(seen), sampled, seen[:3]


def shapes_note(run: Run) -> str | None:
    """Why host growth that no holder explains follows the new input shapes, or None where most
    sampled steps brought no new shape (`suspects.rank` uses it where no culprit was named)."""
    new, sampled, shapes = new_shapes(run)
    if new < MIN_NEW_SHAPES or new < NEW_SHAPE_SHARE * sampled:
        return None
    return (
        f"the model's input had a shape not seen before on {new} of the {sampled} sampled steps "
        f"({', '.join(shapes)}, ...): native code keeps something per new shape (oneDNN primitives, "
        "cuBLAS plans, cuDNN algorithms, compiled kernels), so memory grows while new shapes appear, "
        "and it stops there"
    )


def per_shape_growth(suspect: Suspect, why: str) -> Suspect:
    """A suspect of host growth no culprit explains, as it reads where new input shapes explain it
    (`why`, from `shapes_note`): no leak."""
    return not_a_leak(suspect, why, FIX)
