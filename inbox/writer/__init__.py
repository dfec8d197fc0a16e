"""The job writer's engine; callers import ``inbox.transitions``."""
