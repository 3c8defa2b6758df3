"""Streaming generation with a recurrent (fixed-size state) decoder, one token per step of a long
request: the decode generator keeps every token's full-vocabulary scores in a local list
``scores`` although nobody asked for them (``output_scores=False``). The model's state is the same
size at every token (as a Mamba/SSM or GRU state is), so the only thing that grows is ``scores``:
a vocabulary-sized tensor per token, for as long as the request runs (thousands of tokens).

Real case: state-spaces/mamba https://github.com/state-spaces/mamba/pull/610 ("do not save past
scores if output_scores=False": "The previous implementation stored all past scores, regardless if
``output_scores`` is True or False, leading to significant memory blowup during long generations").
"""
import torch
from torch import nn

from ._common import DIM, seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "scores", "top": 1}
VOCAB = 512


class RecurrentLM(nn.Module):
    def __init__(self, vocab=VOCAB, d=DIM):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.cell = nn.GRUCell(d, 2 * d)
        self.head = nn.Linear(2 * d, vocab)

    def forward(self, tok, state):
        state = self.cell(self.embed(tok), state)
        return self.head(state), state


def decode(model, prompt, max_new, output_scores=False):
    """Yield one token (per sequence) at a time; ``scores`` is returned at the end, if asked."""
    scores = []
    state = torch.zeros(prompt.shape[0], model.cell.hidden_size)
    tok = prompt
    with torch.inference_mode():
        for _ in range(max_new):
            logits, state = model(tok, state)
            scores.append(logits)  # the leak: kept whether or not output_scores is set
            tok = logits.argmax(-1)
            yield tok
    return scores if output_scores else None


def run(tracker_factory, steps=30):
    g = seed(531)
    model = RecurrentLM().eval()
    prompt = torch.randint(0, VOCAB, (16,), generator=g)
    out = []
    with tracker_factory(model) as tracker:
        for step, tok in enumerate(decode(model, prompt, max_new=4096)):
            out.append(int(tok[0]))  # streamed to the client
            tracker.step()
            if step + 1 >= steps:
                break
