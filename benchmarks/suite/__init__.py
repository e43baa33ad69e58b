"""The suite: jaxsearch next to its peers (scipy, optax, jaxopt, optimistix), one script per
comparison, each written with jaxsearch's public names only and each writing
`benchmarks/results/<name>_<backend>[_<tag>].md` and `.json` (`benchmarks.output`).

    python -m benchmarks.suite --list   # the comparisons
    python -m benchmarks.suite          # all of them, in turn (hours)
    python -m benchmarks.suite --quick  # each in its quick mode, into /tmp
    python -m benchmarks.suite --only speed,batched
    python -m benchmarks.suite.speed --help  # one of them, with its own options
"""

# name: what `--quick` passes to it (each module's own quick mode where it has one)
SCRIPTS = {
    "cutest": ["--quick"],
    "speed": ["--quick"],
    "batched": ["--quick"],
    "bounded_vs_scipy": ["--max-n", "10"],
    "least_squares": ["--quick"],
    "networks": ["--quick"],
    "stochastic": ["--epochs", "2", "--seeds", "0", "--rounds", "1"],
    "pinn_quasi_newton": ["--quick"],
    "fresh_fit": ["--quick"],
    "first_call": ["--quick"],
}
