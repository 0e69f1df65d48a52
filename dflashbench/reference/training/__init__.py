"""Training the reference models from scratch on the built-in corpus: the shared loop, batches and checkpoints
(:mod:`.common`), the tokenizer (:mod:`.tokenizer`), the target (:mod:`.target`), a DFlash drafter
(:mod:`.dflash`) and an EAGLE-3 head (:mod:`.eagle3`)."""
