"""The z3 side of toki: the second, independent statement of the write path, and the
vocabulary the proofs in the repository's `proofs/` package share.

- `encoding`: one bounded encoding of claims, a transaction history under each isolation
  level, the operators' write path over one head row per key, replay and the anomalies
  N1–N3 (docs/proofs.md);
- `algebra`: unbounded lemmas about the operators' merge functions;
- `judgelog`: the keyed judge log and re-adjudication (provenance soundness, tightness);
- `simulate`: the encoded write path as simulator agents, so z3 and the simulator are
  compared schedule for schedule (`proofs/agreement.py`);
- `prover` and `result`: run one statement through z3 and keep its outcome as a value;
- `cli`: `toki prove`.

It imports z3 and the simulator, never the library's store or `Memory`: the encoding is a
statement of the write path written apart from toki/write.py, so that the two can check
each other.
"""
