"""The Hugging Face Trainer callback on CPU: a tiny GPT-2 built from a config, an in-memory dataset.
A clean fit, losses compared to an untracked one, a metric-list leak and a fit that raises are in
tests/stacks/test_hf_trainer.py."""

import memleak
from helpers import import_error_without, needs

pytestmark = needs("transformers", "accelerate")  # accelerate: the Trainer needs it

LEVEL = "full"


def tiny_gpt2(leak: bool):
    from hf_fits import tiny_gpt2

    model = tiny_gpt2()
    if leak:
        model.logits_seen = []  # the leak: every step's logits kept on the model

        def keep(module, args, output):
            model.logits_seen.append(output)

        model.lm_head.register_forward_hook(keep)
    return model


def train(tmp_path, leak=False, steps=30, **kwargs):
    import transformers
    from hf_fits import Tokens, training_args
    from memleak.integrations.huggingface import MemleakCallback

    cb = MemleakCallback(out=tmp_path / "memleak", level=kwargs.pop("level", LEVEL), print_report=False)
    trainer = transformers.Trainer(model=tiny_gpt2(leak), args=training_args(tmp_path, steps, **kwargs),
                                   train_dataset=Tokens(), callbacks=[cb])
    trainer.train()
    return cb


def test_leaky_training_is_reported_with_its_suspect(tmp_path):
    cb = train(tmp_path, leak=True)
    report = cb.report
    assert report.leak, str(report)
    assert "logits_seen" in " ".join(s.location for s in report.suspects[:3]), str(report)
    out = tmp_path / "memleak"
    assert {"run.jsonl", "report.txt", "findings.json"} <= {p.name for p in out.iterdir()}
    run = memleak.load(out)
    assert len(run.steps) == 30
    assert run.meta["model"] == "GPT2LMHeadModel"
    assert cb.tracker is None


def test_one_iteration_per_optimizer_step_with_gradient_accumulation(tmp_path):
    cb = train(tmp_path, steps=6, gradient_accumulation_steps=2, level="counters")
    assert len(cb.report.run.steps) == 6


def test_missing_transformers_names_the_extra():
    out = import_error_without("memleak.integrations.huggingface", ('transformers',))
    assert "pip install 'memleak[huggingface]'" in out
