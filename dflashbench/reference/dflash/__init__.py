"""The DFlash drafter family: the network and its config (:mod:`.network`), the released checkpoint format
(:mod:`.checkpoint`: ``config.json`` + ``model.safetensors``, and whether a drafter fits a target), and the
drafter the decode loop runs (:mod:`.drafter`). Importing this package does not import torch."""
