"""Run: the sweep itself. Takes the plan's grid; starts each method's server, runs each point (warm-up, counters,
the load) and writes the run directory (manifest, points, requests) as results arrive."""
