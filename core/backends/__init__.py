"""Database backends: Django's, subclassed where the project measured a cost."""
