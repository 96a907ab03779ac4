"""Built-in scorers that need no download: unit-test outcomes and lexical overlap.

``unit_tests``: a request carries ``passed`` and ``total`` (tests passed / run),
or an ``exit_code`` (0 passes); the score is the pass fraction.

``lexical``: a request carries ``response`` and ``reference``; the score is the
IDF-weighted token F1 between them. The IDF table is its "weights": built on a
cold load from the bundled MBPP problems and solutions, kept as the host copy.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from tangram.runtime.models import register

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|[^\sA-Za-z0-9_]")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


@register("unit_tests")
class UnitTestScorer:
    """Pass fraction of a code action's tests."""

    def load(self, device: str, host: Any | None = None) -> Any:
        return None

    def score(self, requests: Sequence[Mapping[str, Any]]) -> list[float]:
        out = []
        for r in requests:
            if "total" in r:
                out.append(r.get("passed", 0) / r["total"] if r["total"] else 0.0)
            else:
                out.append(1.0 if r.get("exit_code") == 0 else 0.0)
        return out

    def unload(self) -> None:
        pass


@register("lexical")
class LexicalScorer:
    """IDF-weighted token F1 between a response and its reference."""

    def __init__(self, corpus: str = "mbpp.jsonl") -> None:
        self.corpus = corpus
        self.idf: dict[str, float] | None = None

    def load(self, device: str, host: Any | None = None) -> Any:
        self.idf = host if host is not None else self._build()
        return self.idf

    def _build(self) -> dict[str, float]:
        df: Counter[str] = Counter()
        n = 0
        with resources.files("tangram.data").joinpath(self.corpus).open() as f:
            for line in f:
                p = json.loads(line)
                df.update(set(tokens(p["text"] + "\n" + p["code"])))
                n += 1
        return {t: math.log((1 + n) / (1 + c)) + 1.0 for t, c in df.items()}

    def score(self, requests: Sequence[Mapping[str, Any]]) -> list[float]:
        if self.idf is None:
            raise RuntimeError("lexical: score before load")
        return [self._f1(r.get("response", ""), r.get("reference", "")) for r in requests]

    def _f1(self, response: str, reference: str) -> float:
        a, b = Counter(tokens(response)), Counter(tokens(reference))
        default = max(self.idf.values(), default=1.0)  # unseen tokens are the rarest
        weight = lambda c: sum(self.idf.get(t, default) * k for t, k in c.items())  # noqa: E731
        common = weight(a & b)
        if common == 0:
            return 0.0
        precision, recall = common / weight(a), common / weight(b)
        return 2 * precision * recall / (precision + recall)

    def unload(self) -> None:
        self.idf = None
