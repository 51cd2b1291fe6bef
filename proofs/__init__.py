"""z3 proofs of toki's soundness statements: one module per statement (see docs/proofs.md)."""
