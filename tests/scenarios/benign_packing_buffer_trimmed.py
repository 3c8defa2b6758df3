"""Sequence packing for causal-LM pre-training: an iterable dataset tokenizes documents of very
different lengths and packs them into fixed ``max_seq_len`` blocks. Token tensors are appended to
``self.buffer`` as documents arrive and a block is cut from the front whenever the buffer holds
enough; what is left over (less than one block, or a long document still being chunked) waits for
the next call. The buffer swells when a long document arrives and shrinks again as it is cut into
blocks: bounded by the longest document plus one block, however long training runs.

Real case: foundation-model-stack/foundation-model-stack https://github.com/foundation-model-stack/foundation-model-stack/pull/128
(``PackedSequenceDataset``: ``self.buffer.extend(example)`` ... "in the yield below we pull out the
next chunk of length max_seq_len and trim that many tokens off the start of the buffer"; the review
asks what happens with documents of several million tokens), and trl's ``ConstantLengthDataset``
https://github.com/huggingface/trl/issues/943.
"""
import torch
from torch import nn

from ._common import TinyTransformer, seed

EXPECTED = {"verdict": "clean", "kind": None, "location": None, "top": 0}

VOCAB, SEQ, BATCH, EOS = 50, 64, 4, 0


class PackedSequenceDataset:
    def __init__(self, g, max_seq_len=SEQ):
        self.g, self.max_seq_len = g, max_seq_len
        self.buffer = []  # 1-D token tensors waiting to be packed
        self.buffered = 0

    def documents(self):
        while True:
            # mostly short documents, now and then a long one (a book, a code file)
            long = torch.rand((), generator=self.g) < 0.3
            n = int(torch.randint(600, 2000, (), generator=self.g)) if long else int(
                torch.randint(20, 300, (), generator=self.g))
            yield torch.cat([torch.randint(1, VOCAB, (n,), generator=self.g), torch.tensor([EOS])])

    def __iter__(self):
        docs = self.documents()
        while True:
            while self.buffered < self.max_seq_len:
                d = next(docs)
                self.buffer.append(d)
                self.buffered += d.numel()
            flat = torch.cat(self.buffer)
            block, rest = flat[: self.max_seq_len], flat[self.max_seq_len:]
            self.buffer, self.buffered = ([rest] if rest.numel() else []), rest.numel()
            yield block


def run(tracker_factory, steps=30):
    g = seed(128)
    model = TinyTransformer(vocab=VOCAB)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    blocks = iter(PackedSequenceDataset(g))
    with tracker_factory(model, optimizer=opt) as tracker:
        for _ in range(steps):
            batch = torch.stack([next(blocks) for _ in range(BATCH)])
            logits = model(batch[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tracker.step()
