"""An instance-segmentation model validated every third training step with a hand-written copy of
torchmetrics' ``MeanAveragePrecision(iou_type="segm")``: ``update(preds, targets)`` appends, per
image, the predicted and ground-truth boolean masks (and boxes, scores, labels) to list states, and
``compute()`` matches them COCO-style. The validation hook calls ``compute()`` and logs the mAP but
never calls ``reset()``, so the list states hold every mask of every validation round: each round
adds a few hundred KiB of ``bool`` masks that are never read again.

Real case: NRCan/geo-deep-learning https://github.com/NRCan/geo-deep-learning/issues/582
("Torchmetrics memory leaks causing OOMs": memory rises after each validation epoch and never goes
down; "the fix is to use ``self.iou_classwise_metric.reset()`` at the end of validation"), following
https://github.com/Lightning-AI/torchmetrics/issues/1949; the segm mAP stores full masks per
detection (compare the mask-evaluation memory fix https://github.com/PaddlePaddle/PaddleDetection/pull/430).
"""
import torch
from torch import nn

from ._common import seed

EXPECTED = {"verdict": "leak", "kind": "surviving_tensors", "location": "segm_map.", "top": 1}

H = W = 64
NUM_QUERIES = 8


class SegmMeanAveragePrecision(nn.Module):
    """List states as torchmetrics keeps them (``add_state(..., default=[], dist_reduce_fx=None)``)."""

    def __init__(self, iou_thresholds=(0.5, 0.75)):
        super().__init__()
        self.iou_thresholds = iou_thresholds
        self.detection_mask = []
        self.detection_scores = []
        self.detection_labels = []
        self.groundtruth_mask = []
        self.groundtruth_labels = []

    def update(self, preds, targets):
        for p, t in zip(preds, targets):
            self.detection_mask.append(p["masks"].detach().cpu())
            self.detection_scores.append(p["scores"].detach().cpu())
            self.detection_labels.append(p["labels"].detach().cpu())
            self.groundtruth_mask.append(t["masks"].cpu())
            self.groundtruth_labels.append(t["labels"].cpu())

    @staticmethod
    def _mask_iou(a, b):
        a = a.flatten(1).float()
        b = b.flatten(1).float()
        inter = a @ b.T
        return inter / (a.sum(1)[:, None] + b.sum(1)[None] - inter).clamp(min=1)

    def compute(self):
        aps = []
        for thr in self.iou_thresholds:
            tp, n_gt = 0, 0
            for dm, ds, gm in zip(self.detection_mask, self.detection_scores, self.groundtruth_mask):
                order = ds.argsort(descending=True)
                iou = self._mask_iou(dm[order], gm)
                tp += int((iou.max(1).values >= thr).sum()) if len(gm) else 0
                n_gt += len(gm)
            aps.append(tp / max(n_gt, 1))
        return torch.tensor(aps).mean()

    def reset(self):
        for name in ("detection_mask", "detection_scores", "detection_labels",
                     "groundtruth_mask", "groundtruth_labels"):
            setattr(self, name, [])


class MaskHead(nn.Module):
    """Per-query mask logits from a small conv backbone (a MaskFormer-like head)."""

    def __init__(self, ch=16, classes=5):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, ch, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(ch, ch, 3, padding=1), nn.ReLU())
        self.queries = nn.Parameter(torch.randn(NUM_QUERIES, ch))
        self.cls = nn.Linear(ch, classes)

    def forward(self, x):
        f = self.backbone(x)
        mask_logits = torch.einsum("qc,bchw->bqhw", self.queries, f)
        return mask_logits, self.cls(self.queries)


def sample(g, n):
    images = torch.randn(n, 3, H, W, generator=g)
    masks = torch.rand(n, NUM_QUERIES, H, W, generator=g) > 0.7
    labels = torch.randint(0, 5, (n, NUM_QUERIES), generator=g)
    return images, masks, labels


def run(tracker_factory, steps=30):
    g = seed(582)
    model = MaskHead()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    segm_map = SegmMeanAveragePrecision()
    history = []
    with tracker_factory(model, optimizer=opt) as tracker:
        for step in range(steps):
            images, masks, labels = sample(g, 4)
            mask_logits, cls_logits = model(images)
            loss = nn.functional.binary_cross_entropy_with_logits(mask_logits, masks.float())
            loss = loss + nn.functional.cross_entropy(cls_logits.repeat(4, 1), labels.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 3 == 2:  # validation round
                model.eval()
                with torch.no_grad():
                    for _ in range(2):
                        v_images, v_masks, v_labels = sample(g, 8)
                        v_logits, v_cls = model(v_images)
                        scores = v_logits.sigmoid().flatten(2).mean(-1)
                        preds = [{"masks": v_logits[i] > 0, "scores": scores[i],
                                  "labels": v_cls.argmax(-1)} for i in range(8)]
                        targets = [{"masks": v_masks[i], "labels": v_labels[i]} for i in range(8)]
                        segm_map.update(preds, targets)
                    history.append(float(segm_map.compute()))  # the leak: no segm_map.reset()
                model.train()
            tracker.step()
