"""Benchmarks of dflashbench's own parts (``dflashbench bench ...``), outside the decoder library.

* :mod:`~dflashbench.bench.decode_costs` - one decoder step's parts on random weights (AR step, draft pass, verify).
* :mod:`~dflashbench.bench.pair` - AR vs DFlash on a model pair: tau per category, TPOT, losslessness.
* :mod:`~dflashbench.bench.batching` - the engine's loop without HTTP: throughput against concurrency.
* :mod:`~dflashbench.bench.drafting` - EAGLE-3 beside DFlash: decoding and the cost of one draft.
* :mod:`~dflashbench.bench.client_capacity` - how many streams one client process sustains against a paced server.
* :mod:`~dflashbench.bench.overhead` - the client's TTFT overhead per streams x client processes.
* :mod:`~dflashbench.bench.standin` - the paced stand-in server both drive (also the tests' fault injector).
* :mod:`~dflashbench.bench.common` - what they share: torch threads, medians of timed runs, JSON output.

They may import :mod:`dflashbench.reference`; the reference library never imports them.
"""
