"""Fixtures for the LoCoMo tests.

The real file (CC BY-NC) is read from where `load_locomo` finds it and never copied here;
edge cases use small synthetic samples invented in this file.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from toki.errors import DataNotFound
from toki.locomo import LocomoDataset, load_locomo, parse_locomo


@pytest.fixture(scope="session")
def real_dataset() -> LocomoDataset:
    try:
        return load_locomo()
    except DataNotFound as e:
        reason = f"LoCoMo data file not available: {e}"
        print(reason)
        pytest.skip(reason)


SYNTHETIC: dict[str, Any] = {
    "sample_id": "syn-1",
    "conversation": {
        "speaker_a": "Ada",
        "speaker_b": "Bo",
        "session_1_date_time": "9:05 am on 3 March, 2021",
        "session_1": [
            {"speaker": "Ada", "dia_id": "D1:1", "text": "I adopted a grey cat named Pixel."},
            {
                "speaker": "Bo",
                "dia_id": "D1:2",
                "text": "Lovely! Look at my kite.",
                "img_url": ["http://example.invalid/k.jpg"],
                "blip_caption": "a photo of a kite",
                "query": "red kite",
            },
        ],
        "session_2_date_time": "11:40 pm on 12 December, 2021",
        "session_2": [
            {"speaker": "Bo", "dia_id": "D2:1", "text": "I moved to Oslo for work."},
            {"speaker": "Ada", "dia_id": "D2:2", "text": "Oslo is cold in winter."},
        ],
        # a surplus date key with no turns, as conv-26 has: must not create a session
        "session_3_date_time": "1:00 pm on 1 January, 2022",
    },
    "observation": {
        "session_1_observation": {
            "Ada": [["Ada adopted a grey cat named Pixel.", "D1:1"]],
            "Bo": [["Bo flies a red kite.", "D1:2, D1:1"]],
        },
        "session_2_observation": {
            "Bo": [["Bo moved to Oslo for work.", ["D2:1"]]],
            "Ada": [],
        },
    },
    "event_summary": {
        "events_session_1": {"Ada": ["Ada adopts a cat."], "Bo": [], "date": "3 March, 2021"},
        "events_session_2": {
            "Ada": [],
            "Bo": ["Bo relocates to Oslo."],
            "date": "12 December, 2021",
        },
    },
    "session_summary": {
        "session_1_summary": "Ada and Bo talk about pets.",
        "session_2_summary": "Bo has moved.",
    },
    "qa": [
        {
            "question": "What is the name of Ada's cat?",
            "answer": "Pixel",
            "evidence": ["D1:1"],
            "category": 4,
        },
        {
            "question": "When did Bo move to Oslo?",
            "answer": "12 December 2021",
            "evidence": ["D2:1; D1:2"],
            "category": 2,
        },
        {"question": "Which year?", "answer": 2021, "evidence": ["D"], "category": 1},
        {"question": "Where?", "answer": "Oslo; Norway", "evidence": [], "category": 3},
        {
            "question": "What did Ada say?",
            "answer": "x",
            "evidence": ["D:2:2 D1:01"],
            "category": 4,
        },
        {
            "question": "Who is Bo's dog?",
            "adversarial_answer": "Rex",
            "evidence": ["D9:9", "D2:01"],
            "category": 5,
        },
    ],
}


@pytest.fixture
def synthetic() -> list[dict[str, Any]]:
    """A fresh deep copy of one invented sample, as a file would hold it (a list)."""
    return [copy.deepcopy(SYNTHETIC)]


def _obs(text: str, ev: str) -> list[str]:
    return [text, ev]


def invented_sample() -> dict[str, Any]:
    """Three sessions; Ada's job changes twice, her cat is stated once, Bo's city once."""
    return {
        "sample_id": "inv",
        "conversation": {
            "speaker_a": "Ada",
            "speaker_b": "Bo",
            "session_1_date_time": "10:00 am on 1 March, 2021",
            "session_1": [
                {"speaker": "Ada", "dia_id": "D1:1", "text": "x"},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "y"},
            ],
            "session_2_date_time": "10:00 am on 1 June, 2021",
            "session_2": [{"speaker": "Ada", "dia_id": "D2:1", "text": "x"}],
            "session_3_date_time": "10:00 am on 1 September, 2021",
            "session_3": [
                {"speaker": "Ada", "dia_id": "D3:1", "text": "x"},
                {"speaker": "Ada", "dia_id": "D3:2", "text": "y"},
            ],
        },
        "observation": {
            "session_1_observation": {
                "Ada": [
                    _obs("Ada works as a baker in Lyon.", "D1:1"),
                    _obs("Ada adopted a grey cat named Pixel.", "D1:1"),
                ],
                "Bo": [_obs("Bo lives in Oslo.", "D1:2")],
            },
            "session_2_observation": {"Ada": [_obs("Ada works as a nurse in Paris.", "D2:1")]},
            "session_3_observation": {
                "Ada": [
                    _obs("Ada works as a pilot now.", "D3:1"),
                    _obs("Ada ran a marathon yesterday.", "D3:2"),
                ],
            },
        },
        "event_summary": {},
        "qa": [
            {
                "question": "When did Ada run a marathon?",
                "answer": "31 August 2021",
                "evidence": ["D3:2"],
                "category": 2,
            },
            {
                "question": "What is Ada's job?",
                "answer": "pilot",
                "evidence": ["D3:1"],
                "category": 4,
            },
            {
                "question": "Where did Ada work as a baker?",
                "answer": "Lyon",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "Where does Bo live?",
                "answer": "Oslo",
                "evidence": ["D1:2"],
                "category": 4,
            },
        ],
    }


def invented_dataset() -> LocomoDataset:
    """`invented_sample` parsed."""
    return parse_locomo([invented_sample()])


@pytest.fixture
def invented() -> LocomoDataset:
    """An invented three-session conversation whose facts change (for the typed layer)."""
    return invented_dataset()
