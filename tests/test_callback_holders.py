"""A short list of objects of distinct classes (a trainer's callbacks) names each by its class, so
the callback that keeps tensors is the holder, not the list; a list of one class's records (one per
step) stays the list's, whose length is what grows (`walk_scope.named_by_class`)."""

from __future__ import annotations

import torch

import memleak
from memleak.probes.walk_scope import named_by_class
from tests.helpers import model_and_optimizer


class ProgressBar:
    def __init__(self):
        self.done = 0


class LogitsLogger:
    def __init__(self):
        self.buffer = []


class Record:
    def __init__(self, out):
        self.out = out


class Trainer:
    def __init__(self):
        self.callbacks = [ProgressBar(), LogitsLogger()]


def test_named_by_class_wants_two_or_more_objects_of_distinct_user_classes():
    assert named_by_class([ProgressBar(), LogitsLogger()])
    assert not named_by_class([LogitsLogger()])  # one item: the list's
    assert not named_by_class([Record(1), Record(2)])  # one class: records, the list's
    assert not named_by_class([ProgressBar(), torch.zeros(1)])  # a tensor is no object of the user's
    assert not named_by_class([ProgressBar(), {"a": 1}])


def _run(step_fn, steps: int = 12) -> memleak.Report:
    model, opt = model_and_optimizer()
    with memleak.track(model, optimizer=opt, level="auto") as tracker:
        for _ in range(steps):
            out = model(torch.randn(64, 64))
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step_fn(out)
            tracker.step()
    return tracker.report()


def test_the_callback_that_keeps_outputs_is_named_by_its_class_not_the_list():
    trainer = Trainer()
    report = _run(lambda out: trainer.callbacks[1].buffer.append(out))  # each output with its graph
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location == "trainer.callbacks[LogitsLogger].buffer", str(report)


def test_records_of_one_class_stay_named_by_their_list():
    records: list = []
    report = _run(lambda out: records.append(Record(out)))
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location == "records", str(report)


def test_loop_variables_are_read_from_the_bytecode():
    from memleak.probes.frames import loop_variables

    def fit(self, loader):
        for cb in self.callbacks:
            cb.done = 1
        for i, (x, y) in enumerate(loader):
            self.last = (i, x, y)
        kept = [a for a in loader]  # its variable: the comprehension's own code's (inlined from 3.12)
        return kept

    names = loop_variables(fit.__code__)
    assert {"cb", "i", "x", "y"} <= names <= {"cb", "i", "x", "y", "a"}
    module = compile("for k, v in d.items():\n    pass\nn = 1\n", "script.py", "exec")
    assert loop_variables(module) == {"k", "v"}


class LoggingTrainer(Trainer):
    def fit(self, steps: int) -> memleak.Report:
        model, opt = model_and_optimizer()
        with memleak.track(model, optimizer=opt, level="auto") as tracker:
            for _ in range(steps):
                out = model(torch.randn(64, 64))
                opt.zero_grad()
                out.pow(2).mean().backward()
                opt.step()
                for cb in self.callbacks:  # leaves `cb` set to the last callback, the one that keeps
                    if isinstance(cb, LogitsLogger):
                        cb.buffer.append(out)
                tracker.step()
        return tracker.report()


def test_a_loop_variable_left_on_a_callback_does_not_name_it_the_list_does():
    report = LoggingTrainer().fit(12)
    assert report.verdict.value == "leak", str(report)
    assert report.suspects[0].location == "self.callbacks[LogitsLogger].buffer", str(report)
