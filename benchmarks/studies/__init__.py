"""The studies: one question per file, each answered by measuring on this checkout; the
module's docstring opens with the question and gives the date and commit of its last change.
Run one as `python -m benchmarks.studies.<name>` from the repository root.
"""
