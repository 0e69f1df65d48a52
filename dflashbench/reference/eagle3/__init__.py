"""The EAGLE-3 drafter family, the comparison point for DFlash: the head's config (:mod:`.config`), network and
K/V cache (:mod:`.network`), training-time-test unroll (:mod:`.ttt`), checkpoint in the layout vLLM and SGLang
load (:mod:`.checkpoint`), and the drafter the decode loop runs (:mod:`.drafter`). Importing this package does
not import torch."""
