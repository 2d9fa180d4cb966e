"""Commands users run from the repository root: ``python -m llmops.<command>``."""
