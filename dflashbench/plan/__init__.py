"""Plan: what to run. Takes a suite (or flags), the model registry and the machine's GPUs and CPUs; gives the
resolved configuration, the grid of points with each method's launch plan, and what a dry run prints."""
