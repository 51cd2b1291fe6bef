"""BM25 retrieval: tokenizer, hand-computed scores, deterministic tie-breaks."""

from __future__ import annotations

import math

import pytest

from toki.errors import InvalidInput
from toki.locomo import BM25Retriever, Chunk, Hit, Retriever, Tokenizer, hit_evidence, tokenize


def test_tokenizer() -> None:
    text = "Caroline's new cat\u2014Pixel, 3 yrs! snake_case Caf\u00e9"
    assert tokenize(text, stopwords=False) == [
        "caroline",
        "s",
        "new",
        "cat",
        "pixel",
        "3",
        "yrs",
        "snake",
        "case",
        "caf\u00e9",
    ]
    assert tokenize(text) == [
        "caroline",
        "new",
        "cat",
        "pixel",
        "3",
        "yrs",
        "snake",
        "case",
        "caf\u00e9",
    ]
    assert tokenize("What did she do when it rained?") == ["rained"]
    assert tokenize("Running hikes", stem=True) == ["run", "hike"]
    assert Tokenizer(stopwords=frozenset({"cat"}))("the cat") == ["the"]


def _lucene(
    tf: int, df: int, n: int, dl: int, avgdl: float, k1: float = 1.5, b: float = 0.75
) -> float:
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))


def test_bm25_scores_match_hand_computation() -> None:
    chunks = [
        Chunk("c0", "Cat sat, mat."),
        Chunk("c1", "dog chased the cat cat"),
        Chunk("c2", "Dog barked"),
    ]
    r = BM25Retriever(chunks)
    # after stop-word removal: dl = 3, 4, 2 → avgdl = 3; df(cat) = 2 of N = 3
    expected = [_lucene(1, 2, 3, 3, 3.0), _lucene(2, 2, 3, 4, 3.0), 0.0]
    assert list(r.scores("the cat?")) == pytest.approx(expected, rel=1e-5)
    hits = r.retrieve("the cat?", k=5)
    assert [(h.chunk.id, h.rank) for h in hits] == [("c1", 0), ("c0", 1)]  # c2 scores 0
    assert hits[0].score == pytest.approx(expected[1], rel=1e-5)
    # two query terms add up
    both = _lucene(1, 2, 3, 4, 3.0) + _lucene(2, 2, 3, 4, 3.0)  # dog (tf 1) + cat (tf 2) in c1
    assert r.scores("dog cat")[1] == pytest.approx(both, rel=1e-5)


def test_ties_break_by_insertion_order_not_id() -> None:
    chunks = [
        Chunk("z", "blue bird"),
        Chunk("a", "red fox"),
        Chunk("m", "blue bird"),
        Chunk("b", "blue bird"),
    ]
    r = BM25Retriever(chunks)
    assert [h.chunk.id for h in r.retrieve("bird", k=10)] == ["z", "m", "b"]
    assert [h.chunk.id for h in r.retrieve("bird", k=2)] == ["z", "m"]
    # the same query twice, or a freshly built index, gives the same ranking
    again = BM25Retriever(list(chunks))
    assert [h.chunk.id for h in again.retrieve("bird", k=10)] == ["z", "m", "b"]


def test_no_match_and_edge_cases() -> None:
    r = BM25Retriever([Chunk("x", "apples and pears")])
    assert r.retrieve("bananas", k=3) == []
    assert r.retrieve("the of and", k=3) == []  # only stop words
    assert r.retrieve("", k=3) == []
    assert BM25Retriever([]).retrieve("apples", k=3) == []
    with pytest.raises(InvalidInput):
        r.retrieve("apples", k=0)
    with pytest.raises(InvalidInput, match="duplicate"):
        BM25Retriever([Chunk("x", "a"), Chunk("x", "b")])


def test_stemming_tokenizer_matches_inflections() -> None:
    chunks = [Chunk("a", "She went hiking"), Chunk("b", "She went home")]
    assert BM25Retriever(chunks).retrieve("hikes", k=2) == []
    stemmed = BM25Retriever(chunks, tokenizer=Tokenizer(stem=True))
    assert [h.chunk.id for h in stemmed.retrieve("hikes", k=2)] == ["a"]


def test_protocol_and_hit_evidence() -> None:
    r: Retriever = BM25Retriever(
        [
            Chunk("a", "kite", {"evidence": ("D1:2", "D1:3")}),
            Chunk("b", "kite kite", {"evidence": "D2:1"}),
            Chunk("c", "kite"),
        ]
    )
    assert isinstance(r, Retriever)
    hits = r.retrieve("kite", k=3)
    assert [h.chunk.id for h in hits] == ["b", "a", "c"]
    assert hit_evidence(hits) == [("D2:1",), ("D1:2", "D1:3"), ()]
    assert hit_evidence([Hit(Chunk("q", "t"), 1.0, 0)]) == [()]
