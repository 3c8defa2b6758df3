"""One buffer of plain data (a StringIO a logging handler writes to) larger at every walk is its own
witness of a leak: its size is measured, not estimated, and it grows only by what is written to it.
Its lines are small strings in pymalloc's arenas, which a process reuses, so host memory may not show
it. A buffer that shrank once, several objects, or too few walks are not enough on their own."""
import io

from memleak.detect.object_holders import IN_PLACE_SAMPLES, _grown_in_place
from memleak.probes.pydata import item_size
from memleak.records import HolderRow


def _rows(sizes, objects=1):
    return [HolderRow("session_log", "local", objects=objects, obj_bytes=b) for b in sizes]


def test_a_buffer_larger_at_every_walk_has_grown_in_place():
    grows = [1000 * (i + 1) for i in range(IN_PLACE_SAMPLES)]
    assert _grown_in_place(_rows(grows), "local")
    assert not _grown_in_place(_rows(grows[:-1]), "local")  # too few walks
    assert not _grown_in_place(_rows([*grows[:3], 500, *grows[3:]]), "local")  # emptied once: drained
    assert not _grown_in_place(_rows(grows, objects=3), "local")  # items of a container, estimated
    assert not _grown_in_place(_rows(grows), "jit")  # traced functions: their graphs grow


def test_a_stringio_is_sized_by_its_text():
    log = io.StringIO()
    empty = item_size(log)
    log.write("x" * 10_000)
    assert item_size(log) >= empty + 10_000
    log.close()
    assert item_size(log) == empty  # closed: its text is gone
