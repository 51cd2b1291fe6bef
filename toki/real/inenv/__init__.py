"""The half of `toki.real` that runs inside the system's own virtual environment.

Standard library only (plus the library under test and, for toki's own adapters, toki):
the worker process (`python -m inenv ADAPTER`, with `toki/real` on PYTHONPATH) installs the
network guard, imports the library, patches its clock and uuid, wraps its boundary calls as
gate points and serves the line-JSON protocol on stdin/stdout (`server.py`). Modules import
each other relatively, so the package also imports as `toki.real.inenv` (for the tests).
"""
