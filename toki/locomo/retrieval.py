"""Lexical retrieval over memory chunks with BM25 (the `bm25s` library).

Retrieval is deterministic: the same chunks and query give the same ranking on every run and
machine, ties broken by the order chunks were given in. bm25s does the scoring; toki only
tokenizes and sorts, because bm25s's own top-k selection does not promise a tie order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import bm25s
import numpy as np

from toki.errors import InvalidInput

# A small fixed English stop-word list (function words only). Fixed in code, not taken from a
# library, so that rankings cannot change when a dependency updates its list.
STOP_WORDS: frozenset[str] = frozenset(
    """
    a an the and or but if then else of at by for with about against between into through
    during before after above below to from up down in out on off over under again further
    once here there all any both each few more most other some such no nor not only own same
    so than too very s t can will just don should now i me my myself we our ours ourselves you
    your yours yourself yourselves he him his himself she her hers herself it its itself they
    them their theirs themselves what which who whom when where why how this that these those
    am is are was were be been being have has had having do does did doing would could ought
    m re ve ll d
    """.split()  # noqa: SIM905 - a word list reads better as text
)

_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """Lowercase, split on anything that is not a letter or digit (so punctuation is dropped
    and "Caroline's" gives "caroline", "s"), optionally drop `STOP_WORDS`, optionally
    Porter-stem (the stemmer LoCoMo's scorer uses)."""

    stopwords: frozenset[str] = STOP_WORDS
    stem: bool = False

    def __call__(self, text: str) -> list[str]:
        tokens = [t for t in _WORD.findall(text.lower()) if t not in self.stopwords]
        if self.stem:
            from toki.locomo.metrics import porter_stem

            tokens = [porter_stem(t) for t in tokens]
        return tokens


def tokenize(text: str, *, stopwords: bool = True, stem: bool = False) -> list[str]:
    """`Tokenizer` as a function: with or without the stop-word list, with or without stemming."""
    return Tokenizer(STOP_WORDS if stopwords else frozenset(), stem)(text)


@dataclass(frozen=True, slots=True)
class Chunk:
    """A retrievable unit of memory; `metadata` carries e.g. dates and evidence turn ids."""

    id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved chunk with its score and 0-based rank."""

    chunk: Chunk
    score: float
    rank: int


@runtime_checkable
class Retriever(Protocol):
    """Anything that ranks stored chunks for a query."""

    def retrieve(self, query: str, k: int) -> list[Hit]: ...


class BM25Retriever:
    """BM25 (bm25s, Lucene variant, k1=1.5, b=0.75 by default) over a fixed list of chunks.

    Only chunks with a positive score are returned: a chunk sharing no term with the query is
    not evidence of anything, and answerers use an empty result to abstain.
    """

    def __init__(
        self,
        chunks: Iterable[Chunk],
        *,
        tokenizer: Tokenizer | None = None,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        self.chunks: tuple[Chunk, ...] = tuple(chunks)
        ids = [c.id for c in self.chunks]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise InvalidInput(
                "chunks", f"duplicate chunk id {dup!r}", "give every chunk a unique id"
            )
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer()
        self._model = bm25s.BM25(k1=k1, b=b)
        self._vocab: frozenset[str] = frozenset()
        if self.chunks:
            corpus = [self.tokenizer(c.text) for c in self.chunks]
            self._model.index(corpus, show_progress=False)
            self._vocab = frozenset(t for doc in corpus for t in doc)

    def scores(self, query: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        """BM25 score of every chunk, in chunk order (zeros when nothing matches)."""
        q = [t for t in self.tokenizer(query) if t in self._vocab]
        if not q:
            return np.zeros(len(self.chunks), dtype=np.float64)
        return np.asarray(self._model.get_scores(q), dtype=np.float64)

    def retrieve(self, query: str, k: int) -> list[Hit]:
        """Top-k chunks by score; ties by index order. Fewer than k when fewer match."""
        if k < 1:
            raise InvalidInput("k", f"must be at least 1, got {k}")
        s = self.scores(query)
        # Stable sort on -score keeps index order among equal scores.
        order = np.argsort(-s, kind="stable")
        hits: list[Hit] = []
        for i in order[:k]:
            score = float(s[i])
            if score <= 0.0:
                break
            hits.append(Hit(self.chunks[int(i)], score, len(hits)))
        return hits


def hit_evidence(hits: Sequence[Hit]) -> list[tuple[str, ...]]:
    """The turn ids each hit covers (its `metadata["evidence"]`), for `evidence_recall_at_k`."""
    out: list[tuple[str, ...]] = []
    for h in hits:
        ev = h.chunk.metadata.get("evidence", ())
        out.append((ev,) if isinstance(ev, str) else tuple(ev))
    return out
