"""Compiling: compile counts, caches, retracing, the programs and their options."""
