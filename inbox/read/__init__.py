"""Read models: what a console page shows, built by one call. Everything here reads; writes go
through ``inbox.transitions``."""
