"""The chaos and soak suite: `python -m tests.chaos short|long|soak` (docs/sections/chaos.md)."""
