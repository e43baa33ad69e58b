"""The project itself: architecture, docs, docstrings, examples, packaging, public surface."""
