"""The executor's parts, one subject a module; ``inbox.executor`` is the face callers import.

``settings`` (the validated configuration and the counters), ``keeper`` (the lease keeper
thread), ``checks`` (what a job must pass before it begins, and running its handler),
``claim`` (the two ways a turn claims, as small strategies of the one turn path) and
``steps`` (reading back what a step whose response was lost committed). Only
``inbox.executor`` imports them.
"""
