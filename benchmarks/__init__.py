"""jaxsearch's benchmarks: `suite/`, the comparisons with its peers, and `studies/`, one
question each. Run them from the repository root as modules (`python -m benchmarks.suite`);
see benchmarks/README.md.
"""
