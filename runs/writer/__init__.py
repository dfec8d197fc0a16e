"""The engine behind ``runs.transitions``, one module per subject.

Callers import ``runs.transitions``; these modules are its parts: ``guard`` (the one guarded
UPDATE and the owner's write scope), ``rows`` (loading and locking), ``lease`` (effective status
and the lease), ``events`` (each audit event's shape), ``plan``, ``groups`` (serve and defer),
``members`` (dispose) and ``close``.
"""
