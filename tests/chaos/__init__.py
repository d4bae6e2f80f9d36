"""The chaos and soak suite: `python -m tests.chaos short|long|soak` (see the README)."""
