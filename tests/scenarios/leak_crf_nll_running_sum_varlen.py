"""A BiLSTM-CRF tagger (the PyTorch NLP tutorial's model) trained one sentence at a time on
sentences of random length (6 to 60 tokens). The loop keeps a running sum of the negative
log-likelihood for its progress report, ``sum_log_likelihood += neg_log_likelihood``, on the tensor
itself. Each step's CRF forward algorithm builds a graph whose size grows with the sentence length
(a log-sum-exp per token over the tag lattice), and the running sum keeps every step's graph, so the
growth per step varies several-fold with the sentence drawn: the memory curve rises in uneven
steps rather than a straight line.

Real case: pytorch/pytorch https://github.com/pytorch/pytorch/issues/1840 ("pytorch's gpu memory
usage is ceaselessly grow up", the BiLSTM-CRF tutorial: "I suspect it occurred at this:
sum_log_likelihood += neg_log_likelihood"; "This will keep the graph of all previous timesteps
forever").
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "retained_graph", "location": "sum_log_likelihood", "top": 1}
VOCAB, TAGS, EMB, HID = 200, 7, 32, 32


class BiLSTM_CRF(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMB)
        self.lstm = nn.LSTM(EMB, HID // 2, bidirectional=True)
        self.hidden2tag = nn.Linear(HID, TAGS)
        self.transitions = nn.Parameter(torch.randn(TAGS, TAGS) * 0.1)

    def _features(self, sentence):
        out, _ = self.lstm(self.embed(sentence).unsqueeze(1))
        return self.hidden2tag(out.squeeze(1))

    def _forward_alg(self, feats):
        alpha = torch.full((TAGS,), -10000.0)
        alpha[0] = 0.0
        for feat in feats:  # one log-sum-exp per token: the graph grows with the length
            alpha = torch.logsumexp(alpha.unsqueeze(0) + self.transitions + feat.unsqueeze(1), dim=1)
        return torch.logsumexp(alpha, 0)

    def _score(self, feats, tags):
        prev = torch.cat([torch.zeros(1, dtype=torch.long), tags[:-1]])
        return (self.transitions[tags, prev] + feats.gather(1, tags[:, None]).squeeze(1)).sum()

    def neg_log_likelihood(self, sentence, tags):
        feats = self._features(sentence)
        return self._forward_alg(feats) - self._score(feats, tags)


def run(tracker_factory, steps=30):
    g = seed(1840)
    model = BiLSTM_CRF()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-4)
    sum_log_likelihood = 0
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            n = int(torch.randint(6, 61, (1,), generator=g))
            sentence = torch.randint(0, VOCAB, (n,), generator=g)
            tags = torch.randint(0, TAGS, (n,), generator=g)
            neg_log_likelihood = model.neg_log_likelihood(sentence, tags)
            opt.zero_grad()
            neg_log_likelihood.backward()
            opt.step()
            sum_log_likelihood += neg_log_likelihood  # the leak: neg_log_likelihood.item()
            tracker.step()
