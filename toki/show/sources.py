"""Read every kind of file toki writes into a `Page` (`load_page` decides which).

Model and relay witnesses are re-run exactly (as `toki replay` does) so every scheduler
choice becomes a row with the store operations it made; a crash or an injected fault is a row
of its own. A real witness is re-run on the real code when its environment exists (the full
record of each gate point: claim, detail, reply), else its saved story is drawn line by line.
A toki history is drawn from its op records (re-run through its model when the header names
one, which gives each operation its agent); an Elle/Jepsen history from its transactions.
The explanation is always the text the matching command prints. The readers:
`toki.show.simulated`, `toki.show.real_witness`, `toki.show.histories`.
"""

from __future__ import annotations

import json
from pathlib import Path

from toki.errors import InvalidInput
from toki.show.histories import elle_history, load_elle, toki_history
from toki.show.page import Page
from toki.show.real_witness import real_witness
from toki.show.simulated import model_witness, relay_witness

__all__ = ["WITNESS_KINDS", "file_kind", "load_elle", "load_page"]

#: The `format` field of each witness kind toki writes.
WITNESS_KINDS = {
    "toki-witness": "model witness",
    "toki-relay-witness": "relay witness",
    "toki-real-witness": "real witness",
}


def file_kind(path: Path) -> str:
    """ "model witness", "relay witness", "real witness", "toki history" or "Elle history"."""
    from toki.history import detect_format

    try:
        head = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(
            "file", f"{path} is not a text file", "give a witness or a history file"
        ) from None
    except OSError as exc:
        raise InvalidInput("file", f"cannot read {path}: {exc.strerror or exc}") from None
    if head.lstrip().startswith("{"):
        try:
            data = json.loads(head)
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("format") in WITNESS_KINDS:
            return WITNESS_KINDS[str(data["format"])]
    fmt = detect_format(path)
    return "toki history" if fmt == "toki" else "Elle history"


def load_page(path: str | Path, *, replay_real: bool = True) -> Page:
    """The page of one witness or history file. `replay_real=False` draws a real witness
    from its saved story without starting the library (what the matrix page does)."""
    p = Path(path)
    kind = file_kind(p)
    if kind == "model witness":
        return model_witness(p)
    if kind == "relay witness":
        return relay_witness(p)
    if kind == "real witness":
        return real_witness(p, replay_real)
    if kind == "toki history":
        return toki_history(p)
    return elle_history(p)
