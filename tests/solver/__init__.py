"""The solver: run, step, results, history, statuses, stopping, resuming, errors, derivatives."""
