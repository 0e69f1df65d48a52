"""dflashbench's reference DFlash decoder: a library (it imports nothing of the harness but ``errors``).

* :mod:`~dflashbench.reference.draft` - the DFlash draft network in plain torch.
* :mod:`~dflashbench.reference.checkpoint` - the released checkpoint format (config.json + model.safetensors).
* :mod:`~dflashbench.reference.target` - any transformers causal LM as the target.
* :mod:`~dflashbench.reference.decode` - AR and DFlash decoding (greedy and sampled), lossless.
* :mod:`~dflashbench.reference.engine` - the batching engine behind ``dflashbench serve``.

Submodules import torch; this package module does not, so importing it stays cheap.
"""
