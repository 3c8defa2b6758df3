"""Graph-only growth: which holder carries its autograd graph from step to step, and the user's line."""
from __future__ import annotations

import os
import sys
import sysconfig

import pandas as pd
import torch
from torch import nn

import memleak
from memleak.detect import graphs
from memleak.probes import frames
from memleak.probes import graphs as probe_graphs
from memleak.probes.frames import user_site
from memleak.probes.holders import walk_roots
from memleak.probes.identity import Ages
from memleak.run import Run
from memleak.schema import Kind


def _walk(frame, step, prev=None):
    return walk_roots(step=step, model=None, optimizer=None, ages=Ages(), exclude=set(), frames=[frame],
                      prev_roots=prev)


# ---------------------------------------------------------------- probe: links between samples
def test_a_running_sum_is_linked_and_an_item_read_is_not():
    w = torch.randn(4, requires_grad=True)
    total = torch.zeros(())
    logged = 0.0
    frame = sys._getframe()
    walks, prev = [], None
    for step in range(3):
        loss = (w * (step + 1)).sum()
        total += loss             # in place: the new graph sits on the old one
        logged += loss.item()     # read only: builds nothing
        walk = _walk(frame, step, prev)
        walks.append(walk)
        prev = walk.roots
    assert not walks[0].holders["total"].linked  # nothing to be linked to yet
    assert walks[1].holders["total"].linked and walks[2].holders["total"].linked
    assert not walks[2].holders["loss"].linked


def test_a_leaf_only_a_held_graph_keeps_is_held_by_that_holder_and_a_parameter_is_not():
    # a penalty kept with its graph: the input made to require grad lives only through the graph's
    # AccumulateGrad node, and survivors are named after the holder of that graph
    w = nn.Parameter(torch.randn(4, 4))
    kept = []
    leaf = torch.randn(2, 4).requires_grad_(True)
    kept.append((leaf @ w).pow(2).sum())
    leaf_id = id(leaf)
    del leaf
    walk = walk_roots(step=1, model=None, optimizer=None, ages=Ages(), exclude={id(w)},
                      frames=[sys._getframe()])
    assert walk.tensor_holder.get(leaf_id) == "kept"
    assert id(w) not in walk.tensor_holder  # the run's own, though the same graph keeps it


def test_the_leaves_of_every_entry_of_a_long_list_are_held_by_it_not_only_of_its_sampled_ends():
    # the walk measures a long list by its ends; the graphs of the entries between are walked for
    # their leaves only, so a survivor born in the middle of the run is not "held by nothing"
    critic = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    kept, leaves = [], []
    for _ in range(130):
        mix = torch.randn(4, 8).requires_grad_(True)
        (g,) = torch.autograd.grad(critic(mix).sum(), mix, create_graph=True)
        kept.append(((g.norm(2, dim=1) - 1) ** 2).mean())
        leaves.append(id(mix))
        del mix, g
    walk = walk_roots(step=1, model=None, optimizer=None, ages=Ages(), exclude={id(p) for p in critic.parameters()},
                      frames=[sys._getframe()])
    assert [walk.tensor_holder.get(i) for i in leaves] == ["kept"] * 130
    assert walk.holders["kept"].nodes_capped  # the node count still says it is a lower bound


def test_a_carried_hidden_state_is_linked_and_the_loss_built_on_it_is_not():
    rnn = nn.GRU(3, 5, batch_first=True)
    hidden = torch.zeros(1, 2, 5)
    frame = sys._getframe()
    prev, last = None, None
    for step in range(3):
        out, hidden = rnn(torch.randn(2, 4, 3), hidden)  # never detached
        loss = out.pow(2).mean()  # noqa: F841 (a holder the walk sees)
        last = _walk(frame, step, prev)
        prev = last.roots
    assert last.holders["hidden"].linked
    assert not last.holders["loss"].linked and not last.holders["out"].linked


def test_detached_state_and_independent_outputs_are_not_linked():
    lin = nn.Linear(3, 3)
    state = torch.zeros(3)
    outputs = []
    frame = sys._getframe()
    prev, last = None, None
    for step in range(3):
        state = lin(state + 1).detach().requires_grad_(False)
        state = state * 1.0
        logits = lin(torch.randn(3))
        outputs.append({"logits": logits, "loss": logits.sum()})  # each with its own graph
        carried = lin(state)  # noqa: F841 (built on a detached value)
        last = _walk(frame, step, prev)
        prev = last.roots
    assert not last.holders["outputs"].linked
    assert not last.holders["carried"].linked


# ---------------------------------------------------------------- probe: wrappers made per access
class _Node:
    """A C++ autograd node: a sequence number and its inputs, (node, output number)."""

    def __init__(self, seq, inputs=()):
        self.seq, self.inputs = seq, list(inputs)


class AddBackward0:
    """A node's Python wrapper as torch 2.11 hands it out: made afresh by each ``next_functions``
    and freed once dropped, so the next wrapper made takes its memory, and its id, whichever node
    it wraps (as torch 2.12 does too; 2.13 keeps one wrapper per node for the node's life)."""

    pool: list = []  # every wrapper made; one no one else holds is free memory
    free_refs = 0  # sys.getrefcount of a pooled wrapper no one else holds

    def __init__(self, node):
        self.node = node

    @classmethod
    def of(cls, node):
        for w, refs in zip(cls.pool, cls._refs(), strict=True):
            if refs <= cls.free_refs:  # dead: its memory goes to the new wrapper
                w.node = node
                return w
        w = cls(node)
        cls.pool.append(w)
        return w

    @classmethod
    def _refs(cls):
        return [sys.getrefcount(w) for w in cls.pool]

    @property
    def next_functions(self):
        return tuple((AddBackward0.of(n), nr) for n, nr in self.node.inputs)

    def _sequence_nr(self):
        return self.node.seq


AddBackward0.pool.append(AddBackward0(None))
AddBackward0.free_refs = AddBackward0._refs()[0]


def _chain(n):
    node = _Node(0)
    for seq in range(1, n):
        node = _Node(seq, [(node, 0)])
    return node


def test_the_fake_wrappers_reuse_ids_as_torch_2_11s_do():
    a = AddBackward0.of(_Node(1))
    freed = id(a)
    del a
    assert id(AddBackward0.of(_Node(2))) == freed


def test_a_chain_is_counted_whole_when_each_wrapper_dies_after_use():
    info = probe_graphs.graph_info([AddBackward0.of(_chain(40))], cap=1000)
    assert (info.nodes, info.capped, info.lo, info.hi) == (40, False, 0, 39)
    assert probe_graphs.graph_info([AddBackward0.of(_chain(40))], cap=10).nodes == 10


def test_a_link_is_told_by_the_node_not_by_its_wrapper():
    old = _Node(5)
    kept = AddBackward0.of(old)  # alive: the next wrapper of the same node gets another id
    prev = probe_graphs.roots_of([(kept, 0)])
    new = _Node(9, [(old, 0)])
    now = probe_graphs.roots_of([(AddBackward0.of(new), 0)])
    assert probe_graphs.graph_info([AddBackward0.of(new)], 100, prev, now).linked
    other_output = _Node(9, [(old, 1)])  # the same node, another of its outputs: not what was held
    assert not probe_graphs.graph_info([AddBackward0.of(other_output)], 100, prev, now).linked
    still_held = probe_graphs.roots_of([(AddBackward0.of(new), 0), (kept, 0)])  # a container of both
    assert not probe_graphs.graph_info([AddBackward0.of(new)], 100, prev, still_held).linked
    assert probe_graphs.roots_of([(AddBackward0.of(_Node(probe_graphs.NO_SEQ)), 0)]) == set()


# ---------------------------------------------------------------- detector
STEPS = [1, 4, 7, 10, 13, 16]


def _run(rows_by_step):
    recs = [{"step": s, "holders": rows, "buffers": {}} for s, rows in zip(STEPS, rows_by_step)]
    return Run({"device": "cpu"}, pd.DataFrame({"step": range(20), "time": range(20)}), records={"holders": recs})


def _row(holder, nodes, linked, old=0):
    r = {"holder": holder, "kind": "local", "count": 1, "bytes": 16, "grad": 1, "old": old, "old_bytes": 0,
         "nodes": nodes}
    if linked:
        r["linked"] = True
    return r


def test_graphs_detector_names_the_linked_holder_with_nodes_per_step():
    rows = [[_row("hidden", 10 * s, i > 0), _row("loss", 10 * s + 3, False)] for i, s in enumerate(STEPS)]
    found = graphs.detect(_run(rows))
    assert [f.location for f in found] == ["hidden"]
    f = found[0]
    assert f.kind == Kind.RETAINED_GRAPH and f.leak and f.confidence >= 0.9
    assert any("+10.0 autograd nodes per step" in e for e in f.evidence)
    assert "hidden.detach()" in f.fix


def test_graphs_detector_ignores_a_bounded_chain_and_a_one_off_link():
    window = [[_row("h", 10 * (s % 6), i > 0 and s % 6 != 1)] for i, s in enumerate(STEPS)]  # detached every 6
    once = [[_row("x", 10 * s, i == 2)] for i, s in enumerate(STEPS)]
    assert graphs.detect(_run(window)) == []
    assert graphs.detect(_run(once)) == []


def test_bptt_loop_ranks_hidden_above_loss_read_after_the_step():
    """Truncated BPTT, gradients accumulated over the series: the loss is read (`.item()`) after each
    step ends; the hidden state is what links the steps."""
    torch.manual_seed(0)
    rnn, head = nn.LSTM(4, 8, batch_first=True), nn.Linear(8, 1)
    model = nn.ModuleDict({"rnn": rnn, "head": head})
    hidden = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))
    total = 0.0
    with memleak.track(model, level="full") as tracker:
        for step in range(24):
            out, hidden = rnn(torch.randn(2, 3, 4), hidden)
            loss = head(out[:, -1]).pow(2).mean()
            loss.backward(retain_graph=True)
            tracker.step()
            total += loss.item()
    report = tracker.report()
    top = report.suspects[0]
    assert top.location == "hidden" and top.kind == Kind.RETAINED_GRAPH
    assert any("nodes per step" in e for e in top.evidence)
    assert "loss.detach()" not in top.fix
    assert all(s.confidence < top.confidence for s in report.suspects if s.location == "loss")



def test_a_mean_recomputed_from_a_growing_list_of_losses_is_not_called_a_chain_of_its_own():
    """`mean = sum(losses) / len(losses)` each step: the mean's graph grows with the list, but it is
    never built on the mean before; the list of losses is named, and the mean's fix points at it."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    losses = []
    with memleak.track(model, level="full") as tracker:
        for _ in range(24):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            losses.append(loss)
            mean = sum(losses) / len(losses)
            tracker.step()
    report = tracker.report()
    assert report.suspects[0].location == "losses"
    (second,) = [s for s in report.suspects if s.location == "mean"]
    assert second.confidence < report.suspects[0].confidence
    assert "`losses`" in second.fix and "previous value" not in second.fix
    assert any("not built on its previous value" in e for e in second.evidence)


# ---------------------------------------------------------------- creation sites
def _call_from(filename: str):
    """Run `fn()` from code whose frames claim to live in `filename`."""
    ns: dict = {}
    exec(compile("def call(fn):\n    return fn()\n", filename, "exec"), ns)
    return ns["call"]


def test_site_walks_past_installed_packages_to_the_users_line():
    lib = os.path.join(sysconfig.get_paths()["purelib"], "somepkg", "layers.py")
    via_library = _call_from(lib)
    line = sys._getframe().f_lineno + 1
    site = via_library(lambda: user_site(2))  # frame 2 is the package's: the site is this line
    assert site == f"test_graphs.py:{line}"
    stdlib = os.path.join(sysconfig.get_paths()["stdlib"], "functools.py")
    line = sys._getframe().f_lineno + 1
    assert _call_from(stdlib)(lambda: user_site(2)) == f"test_graphs.py:{line}"


def test_site_is_never_memleaks_own_or_the_optimizers():
    in_memleak = _call_from(os.path.join(frames._MEMLEAK_DIR, "recorder.py"))
    assert in_memleak(lambda: user_site(2)) is None  # frame 2 is memleak's: its own tensor
    in_optim = _call_from(os.path.join(frames._TORCH_DIR, "optim", "sgd.py"))
    assert in_optim(lambda: user_site(2)) is None    # made inside optimizer.step()


def test_births_are_never_tagged_inside_optimizer_step():
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # momentum buffers made in step()
    sites: set[str] = set()
    kept = []
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        probe = next(p for p in tracker._probes if p.name == "tensors")
        for _ in range(4):
            kept.append(model(torch.randn(2, 4)).sum())
            kept[-1].backward()
            step_line = sys._getframe().f_lineno + 1
            opt.step()
            sites |= {e[2] for e in probe.births.values()}
            opt.zero_grad()
    assert sites and all(s.startswith("test_graphs.py:") for s in sites)
    assert f"test_graphs.py:{step_line}" not in sites


def _saved(step, borns, tagged_here=True):
    """A saved record at `step` holding 4 KiB saved on each step of `borns`."""
    from memleak.records import SavedCohort, SavedRecord

    cohorts = tuple(SavedCohort(born=b, site="train.py:9", count=1, bytes=4096) for b in borns)
    return SavedRecord(step=step, cohorts=cohorts, tagged={str(step): [1, 4096]} if tagged_here else {})


def test_saved_growth_is_judged_on_the_steps_that_tagged_not_on_the_walks_alone_after_them():
    from memleak.detect.saved_graphs import saved_growth

    deep = [_saved(s, range(1, s, 2)) for s in range(1, 30, 2)]  # each deep step's saved tensors stay held
    walks = [_saved(s, range(1, 30, 2), tagged_here=False) for s in (60, 100, 150, 199)]  # level auto's checks
    found = saved_growth(deep + walks)
    assert found is not None and found["steps"][-1] == 29
    # the same plateau from steps that did tag is real: what autograd holds stopped growing
    plateau = [_saved(s, range(1, 30, 2)) for s in (60, 100, 150, 199, 250, 300, 350, 400, 450, 500)]
    assert saved_growth(deep + plateau) is None


def test_tensors_saved_for_backward_while_the_creation_site_mode_is_on_get_the_users_line():
    # an op the creation-site mode dispatches saves its tensors for backward from inside the mode's
    # own frame: the site is the user's line that called the op, not "?" (memleak's frame)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = []
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        probe = next(p for p in tracker._probes if p.name == "tensors")
        for _ in range(6):
            loss = model(torch.randn(4, 8)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            kept_line = sys._getframe().f_lineno + 1
            kept.append(model(torch.randn(4, 8)))  # its graph (and what it saved) stays held
            sites = {e[4] for e in probe.saved}
    assert f"test_graphs.py:{kept_line}" in sites
    assert all(s.startswith("test_graphs.py:") for s in sites), sites


def test_saved_growth_says_what_each_sampled_steps_graph_still_keeps():
    from memleak.detect.saved_graphs import attach_saved, saved_growth

    # two sites save on each step: 4 KiB each, 8 KiB a step; what the sampled steps keep grows 4 KiB a
    # step (every other step is sampled), but each of them keeps 8 KiB
    deep = [_saved(s, [b for b in range(1, s, 2) for _ in (0, 1)]) for s in range(1, 30, 2)]
    found = saved_growth(deep)
    assert found is not None and found["per_cohort"] == 8192 and found["cohorts"] == 14
    findings: dict = {}
    attach_saved(found, findings, {})  # no holder keeps graphs: the site that saved the most takes it
    assert any("about 8.0 KiB from each of them" in e for e in findings["train.py:9"]["evidence"])


def test_saved_tensors_evidence_names_the_sites_of_the_record_its_total_comes_from():
    from memleak.detect.saved_graphs import attach_saved, saved_growth
    from memleak.records import SavedCohort, SavedRecord

    def tagged(step):  # each step's graph kept: one cohort more each time
        cohorts = tuple(SavedCohort(born=s, site="train.py:8", count=2, bytes=5120) for s in range(1, step + 1))
        return SavedRecord(step=step, cohorts=cohorts, tagged={str(step): [2, 5120]})

    # level auto's last look walks without tagging: it lists nothing of its own
    records = [tagged(s) for s in range(1, 9)] + [SavedRecord(step=20)]
    info = saved_growth(records)
    findings = {}
    attach_saved(info, findings, {})
    (loc, f), = findings.items()
    line = next(e for e in f["evidence"] if e.startswith("autograd still holds"))
    assert loc == "train.py:8" and "on 8 earlier sampled steps (saved at train.py:8)" in line, line


def test_a_list_that_keeps_each_link_of_a_chain_is_a_container_not_the_carrier():
    """`ema = 0.9 * ema + 0.1 * loss; hist.append(ema)`, first walked long after it began (35 links
    kept): the list reads linked (its newest link is built on the one before), but it gains one each
    step; the chain's carrier `ema` is named here, the list by the culprits detector."""
    rows = [
        [_row("ema", 200 + 10 * s, i > 0), {**_row("hist", 200 + 10 * s, i > 0), "count": 35 + s}]
        for i, s in enumerate(STEPS)
    ]
    assert [f.location for f in graphs.detect(_run(rows))] == ["ema"]
