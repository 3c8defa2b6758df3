"""The line that stores into a holder is found in the user's source: the append, not the computation."""
import inspect
import textwrap

import torch

import memleak
from memleak.holder_names import attribute_owner, leaf_name
from memleak.probes.stores import find_store, store_line

SOURCE = textwrap.dedent('''
    import collections
    import contextvars

    def train(model, batches):
        history = []
        total = 0
        for x in batches:
            out = model(x)
            history.append(out)
            total += out.sum()
        return history

    class Layer:
        def __init__(self):
            self.cache = None
            self.log = collections.defaultdict(list)

        def forward(self, x):
            y = x * 2
            self.cache = y
            self.log["y"].append(y)
            return y

    SEEN = contextvars.ContextVar("seen")

    def remember(t):
        SEEN.get().append(t)

    def log_to(frame, step, loss):
        frame.loc[len(frame)] = [step, loss]
''')


def test_the_owner_of_an_attribute_reads_past_dots_in_keys_and_closure_names():
    assert attribute_owner("metric.preds") == "metric"
    assert attribute_owner("a.b['k.1'].c") == "a.b['k.1']"
    assert attribute_owner("norms['0.weight']") is None  # an entry, not an attribute
    assert attribute_owner("losses (closure of f.<locals>.g)") is None
    assert attribute_owner("state.buf (closure of make_step.<locals>.step)") == "state (closure of make_step.<locals>.step)"
    assert attribute_owner("history") is None


def test_a_dict_of_lists_by_parameter_name_is_one_cause_named_by_its_entries():
    # keys with dots in them (`named_parameters()`): the entries were grouped by what comes before
    # a dot inside the key ("another attribute of norms['0"), and one entry was left out
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    norms: dict = {}
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(40):
            loss = model(torch.randn(64, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            for n, p in model.named_parameters():
                norms.setdefault(n, []).append(p.grad.clone())
            opt.step()
    top = tracker.report().suspects[0]
    assert top.location.startswith("norms['"), str(tracker.report())
    assert not any("another attribute" in e for e in top.evidence), top.evidence
    assert any("3 more entries of norms leak the same way" in e for e in top.evidence), top.evidence
    assert top.evidence[0].startswith(f"the entry {top.location} holds"), top.evidence[0]


def test_leaf_names_are_the_last_name_a_person_typed():
    assert leaf_name("history") == "history"
    assert leaf_name("metric.values") == "values"
    assert leaf_name("logger.history['loss']") == "history"
    assert leaf_name("blocks.1.attn.cache") == "cache"
    assert leaf_name("self.callbacks[...].preds") == "preds"  # a list kept by an object in a list
    assert leaf_name("recent (closure of build.<locals>.observe)") == "recent"  # not `observe)`


def test_the_adding_line_is_found_and_initialisations_are_not(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    lines = SOURCE.splitlines()
    at = {name: 1 + next(i for i, text in enumerate(lines) if needle in text) for name, needle in
          [("append", "history.append"), ("total", "total +="), ("cache", "self.cache = y"), ("log", "self.log["),
           ("seen", "SEEN.get().append"), ("frame", "frame.loc[")]}
    assert store_line(str(path), 1, 100, "history") == at["append"]
    assert store_line(str(path), 1, 100, "total") == at["total"]
    assert store_line(str(path), 1, 100, "blocks.0.cache") == at["cache"]  # not `self.cache = None`
    assert store_line(str(path), 1, 100, "layer.log['y']") == at["log"]
    assert store_line(str(path), 1, 100, "SEEN") == at["seen"]  # into the ContextVar's value, not its creation
    assert store_line(str(path), 1, 100, "frame") == at["frame"]  # a pandas row set through `.loc`
    assert store_line(str(path), 1, 100, "nowhere") is None
    assert store_line(str(path), 12, 100, "history") is None  # outside the span searched
    assert find_store("history", [(str(path), 1, 100)]) == f"train.py:{at['append']}"
    assert store_line(str(tmp_path / "missing.py"), 1, 10, "history") is None


def _keeping_outputs(steps: int) -> tuple[memleak.Tracker, int]:
    """A tracked loop at level full that keeps each step's output in `kept`, and the line that does."""
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    steady = [torch.zeros(4) for _ in range(3)]  # noqa: F841 (walked as a local; it never grows)
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(steps):
            out = model(torch.randn(4, 8))
            out.sum().backward()
            opt.step()
            kept.append(out)
    return tracker, inspect.currentframe().f_lineno - 1  # the line above


def test_a_tracked_loop_records_the_append_line_of_its_growing_list():
    tracker, append_line = _keeping_outputs(40)
    rows = [r for rec in tracker.run().holders for r in rec.holders if r.holder == "kept"]
    assert rows, "the walk did not name `kept`"
    assert rows[-1].stored == f"test_stores.py:{append_line}"
    top = tracker.report().suspects[0]
    assert top.location == "kept"
    assert top.fix.startswith(f"At test_stores.py:{append_line}: ")
    assert any(f"filled at test_stores.py:{append_line}" in e for e in top.evidence)


def test_stores_are_looked_up_for_holders_that_grew_not_at_the_first_walk_nor_for_steady_ones():
    tracker, append_line = _keeping_outputs(20)
    walks = tracker.run().holders
    assert len(walks) >= 3
    stored = [{r.holder: r.stored for r in rec.holders} for rec in walks]
    assert all(line == "" for line in stored[0].values())  # the first walk: nothing to compare with
    assert all(s.get("steady") == "" for s in stored if "steady" in s)  # its size never changed
    assert all(s["kept"] == f"test_stores.py:{append_line}" for s in stored[1:] if "kept" in s)


GROWN_SOURCE = textwrap.dedent('''
    import contextvars
    import heapq
    import torch

    hardest = []

    TRACE = contextvars.ContextVar("trace", default=None)

    class Recall:
        def __init__(self):
            self.embs = torch.empty(0, 64)
            self.avg = torch.tensor(0.0)

        def update(self, emb, loss):
            self.embs = torch.cat([self.embs, emb])
            self.avg = 0.9 * self.avg + 0.1 * loss

    def traced(t):
        lst = TRACE.get()
        if lst is None:
            lst = []
            TRACE.set(lst)
        lst.append(t)

    def keep_hardest(loss, step):
        heapq.heappush(hardest, (loss, step))

    class Bank:
        def __init__(self):
            self.register_buffer("mem", torch.zeros(0, 8))

        def add(self, x):
            self.register_buffer("mem", torch.cat([self.mem, x]))
''')


def test_a_holder_grown_by_rebinding_it_or_through_an_alias_is_found_where_it_grows(tmp_path):
    """Not at its first assignment: `self.embs = torch.cat([self.embs, x])` and an EMA computed from
    itself rebind the holder from its own value; a ContextVar's list is filled through a local."""
    path = tmp_path / "grown.py"
    path.write_text(GROWN_SOURCE)
    lines = GROWN_SOURCE.splitlines()
    at = {needle: 1 + next(i for i, text in enumerate(lines) if needle in text)
          for needle in ("torch.cat([self.embs", "0.9 * self.avg", "lst.append", "heappush", "torch.cat([self.mem")}
    assert store_line(str(path), 1, 100, "recall.embs") == at["torch.cat([self.embs"]
    assert store_line(str(path), 1, 100, "ema.avg") == at["0.9 * self.avg"]
    assert store_line(str(path), 1, 100, "TRACE") == at["lst.append"]
    assert store_line(str(path), 1, 100, "hardest") == at["heappush"]  # a function that adds to its argument
    assert store_line(str(path), 1, 100, "bank.mem") == at["torch.cat([self.mem"]  # a buffer registered again


# What a library returns each step with a list of tensors inside (transformers' DynamicCache and its
# `.layers`): the list is the library's, stored into by no line of the user's
_LIBRARY = {"torch": torch, "__name__": "cachelib.cache_utils"}
exec(compile(
    "class LayeredCache:\n"
    "    def __init__(self, n):\n"
    "        self.layers = [torch.randn(256) for _ in range(n)]\n",
    "/usr/lib/python3/dist-packages/cachelib/cache_utils.py", "exec"), _LIBRARY)
_LayeredCache = _LIBRARY["LayeredCache"]


def test_a_list_kept_by_the_items_of_a_list_is_filled_where_the_items_are_stored():
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cache_per_step = []
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(40):
            loss = model(torch.randn(16, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            cache_per_step.append(_LayeredCache(2))
            line = inspect.currentframe().f_lineno - 1
    top = tracker.report().suspects[0]
    assert top.location == "cache_per_step[...].layers", str(tracker.report())
    assert f"cache_per_step[...].layers is filled at test_stores.py:{line}" in "\n".join(top.evidence), top.evidence
