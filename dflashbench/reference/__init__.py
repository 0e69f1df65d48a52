"""dflashbench's reference decoder: a library (it imports nothing of the harness but ``errors``).

Grouped by job:

* The drafter networks, each family with its config, checkpoint format and drafter:
  :mod:`~dflashbench.reference.dflash` (DFlash: a block per forward pass) and
  :mod:`~dflashbench.reference.eagle3` (EAGLE-3: a chain, one token per pass), built from the shared blocks in
  :mod:`~dflashbench.reference.layers`, read and written through :mod:`~dflashbench.reference.weights`.
* The decode loop and its drafters: :mod:`~dflashbench.reference.decode` (draft, verify, accept, commit;
  lossless, batched) and :mod:`~dflashbench.reference.drafters` (the ``Drafter`` protocol, AR and oracle drafters).
* The target and sampling: :mod:`~dflashbench.reference.target` (any transformers causal LM, its KV cache and
  features) and :mod:`~dflashbench.reference.sampling`.
* Serving: :mod:`~dflashbench.reference.serving` (engine, HTTP server, request schema, ``serve``/``generate``).
* Training: :mod:`~dflashbench.reference.training` (target, DFlash drafter, EAGLE-3 head, tokenizer).
* Models and prompts to run them on: :mod:`~dflashbench.reference.corpus` (demo and training conversations),
  :mod:`~dflashbench.reference.tiny` (tiny random models for tests), :mod:`~dflashbench.reference.random_pair`
  (random weights at real models' shapes), :mod:`~dflashbench.reference.threads` (torch CPU threads).

Benchmarks of these parts live outside the library, in :mod:`dflashbench.bench`.
Submodules import torch; this package module (and each subpackage's) does not, so importing it stays cheap.
"""
