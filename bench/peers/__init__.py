"""The peers' apps and no-op tasks, imported by their workers and by the producer."""
