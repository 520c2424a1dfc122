"""Command-line entry points; the only package that imports Hydra's app machinery."""
