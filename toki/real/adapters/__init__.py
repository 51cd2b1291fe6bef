"""Host halves of the adapters, one module per library (see `toki.real.adapter`)."""
