"""The typed layer: extraction rules, bitemporal facts and typed retrieval, on invented data."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from toki.locomo import LocomoDataset
from toki.locomo.typed import (
    RuleExtractor,
    SessionText,
    TypedAnswerer,
    TypedRetriever,
    asks_current,
    build_typed_memory,
    predicate_of,
    time_of,
)
from toki.time import BoundSource


def test_predicate_rule() -> None:
    assert (
        predicate_of("Ada Lovelace", "Ada attended a pottery class recently.") == "attend_potteri"
    )
    # hedges and auxiliaries are skipped; irregular past forms meet their base form
    assert predicate_of("Ada", "Ada is currently planning to take a pottery class.") == (
        predicate_of("Ada", "Ada took a pottery class last week.")
    )
    assert predicate_of("Ada", "Ada went hiking.") == predicate_of("Ada", "Ada goes hiking.")
    # possessive subject: the possessed noun is the topic
    assert predicate_of("Bo", "Bo's dog loves the beach.").startswith("dog_")
    # the subject not named: start at the beginning
    assert predicate_of("Bo", "The new job makes him happy.") == "job_make"
    assert predicate_of("Bo", "Bo is.") == "misc"
    assert predicate_of("Ada", "Ada attended a pottery class.", n_words=1) == "attend"


@pytest.mark.parametrize(
    ("text", "start", "label", "granularity"),
    [
        ("Ada ran a race yesterday.", date(2023, 5, 24), "24 May 2023", "day"),
        (
            "Ada ran a race last Saturday.",
            date(2023, 5, 20),
            "the saturday before 25 May 2023",
            "day",
        ),
        (
            "Ada ran a race last Thursday.",
            date(2023, 5, 18),
            "the thursday before 25 May 2023",
            "day",
        ),
        ("Ada moved last week.", date(2023, 5, 18), "the week before 25 May 2023", "week"),
        ("Ada visited Rome two weeks ago.", date(2023, 5, 11), "11 May 2023", "day"),
        ("Ada painted a lake last year.", date(2022, 1, 1), "2022", "year"),
        ("Ada moved here 4 years ago.", date(2019, 1, 1), "2019", "year"),
        ("Ada goes camping next month.", date(2023, 6, 1), "June 2023", "month"),
        ("Ada quit her job last month.", date(2023, 4, 1), "April 2023", "month"),
    ],
)
def test_relative_times_are_evidence(text: str, start: date, label: str, granularity: str) -> None:
    said_on = date(2023, 5, 25)  # a Thursday
    t = time_of(text, said_on)
    assert t.start == datetime(start.year, start.month, start.day, tzinfo=UTC)
    assert (t.label, t.granularity, t.source) == (label, granularity, BoundSource.EVIDENCE)


def test_session_date_is_assumed_and_stated_date_is_evidence() -> None:
    t = time_of("Ada likes tea.", date(2023, 5, 25))
    assert t.source is BoundSource.ASSUMED and t.label == "25 May 2023"
    t = time_of("Ada adopts a cat.", date(2023, 5, 25), stated=date(2023, 5, 20))
    assert t.source is BoundSource.EVIDENCE and t.start.date() == date(2023, 5, 20)


def test_rule_extractor_sources() -> None:
    texts = [
        SessionText("observation", 0, "Ada", "Ada adopted a cat.", ("D1:1", "D1:2")),
        SessionText("event", 3, "Ada", "Ada adopts a cat.", (), date(2021, 3, 3)),
    ]
    claims = RuleExtractor().extract(datetime(2021, 3, 3, 9, 5, tzinfo=UTC), texts)
    assert [c.source_id for c in claims] == ["D1:1,D1:2", "event/3"]
    assert [c.subject for c in claims] == ["Ada", "Ada"]
    assert claims[0].predicate == claims[1].predicate == "adopt_cat"


def test_versions_of_one_key_across_sessions(invented: LocomoDataset) -> None:
    ds = invented
    tm = build_typed_memory(ds.conversations[0])
    jobs = [f for f in tm.facts if f.key.fact_key == "work_baker"]
    assert len(jobs) == 1  # "work_baker" vs "work_nurs": the rule keeps two content words
    tm1 = build_typed_memory(ds.conversations[0], extractor=RuleExtractor(n_words=1))
    work = [f for f in tm1.facts if f.key.subject == "Ada" and f.key.fact_key == "work"]
    assert [f.session for f in work] == [1, 2, 3]
    mem = tm1.memory
    hist = mem.history(work[0].key)
    assert [h.version.value for h in hist] == [f.claim.text for f in work]
    # as of June (valid and system time), the nurse version holds; the baker one is history
    june = datetime(2021, 6, 2, tzinfo=UTC)
    assert mem.resolve_at(work[0].key, june, june).value == "Ada works as a nurse in Paris."
    march = datetime(2021, 3, 2, tzinfo=UTC)
    assert mem.resolve_at(work[0].key, march, march).value == "Ada works as a baker in Lyon."
    assert mem.current(work[0].key).value == "Ada works as a pilot now."
    assert len(mem.audit(work[0].key)) == 2  # both losers kept as audit rows
    # recorded at the session time; valid from ASSUMED session time unless stated
    assert hist[0].version.recorded_at == datetime(2021, 3, 1, 10, 0, tzinfo=UTC)
    assert hist[0].version.valid.start_source is BoundSource.ASSUMED
    assert hist[0].version.source_id == "D1:1"
    marathon = next(f for f in tm1.facts if "marathon" in f.claim.text)
    v = mem.version(marathon.version_id)
    assert v.valid.start == datetime(2021, 8, 31, tzinfo=UTC)
    assert v.valid.start_source is BoundSource.EVIDENCE


def test_typed_retrieval_uses_subject_time_and_current_value(invented: LocomoDataset) -> None:
    ds = invented
    conv = ds.conversations[0]
    tm = build_typed_memory(conv, extractor=RuleExtractor(n_words=1))
    r = TypedRetriever(tm)
    ans = TypedAnswerer()
    # temporal: the valid time stated by "yesterday", not the session date
    hits = r.retrieve("When did Ada run a marathon?", 3)
    assert ans.answer("When did Ada run a marathon?", hits, 2) == "31 August 2021"
    # present tense: a superseded version is replaced by the key's current one
    assert asks_current("What is Ada's job?")
    hits = r.retrieve("Where does Ada work in Paris?", 3)
    assert hits[0].chunk.text == "Ada works as a pilot now."
    plain = TypedRetriever(tm, use_current=False).retrieve("Where does Ada work in Paris?", 3)
    assert plain[0].chunk.text == "Ada works as a nurse in Paris."
    # past tense keeps history: the baker version is retrievable in the dual-row store only
    q = "Where did Ada work as a baker?"
    assert not asks_current(q)
    assert r.retrieve(q, 1)[0].chunk.text == "Ada works as a baker in Lyon."
    over = TypedRetriever(tm, overwrite=True)
    assert all("baker" not in h.chunk.text for h in over.retrieve(q, 5))
    # subject filter: a question about Bo never returns Ada's facts
    assert {h.chunk.metadata["subject"] for h in r.retrieve("Where does Bo live?", 5)} == {"Bo"}
