"""Serving the reference decoder: the batching engine (:mod:`.engine`), the OpenAI-compatible HTTP server
(:mod:`.server`) with its request schema (:mod:`.openai_schema`), text streaming (:mod:`.text`) and ``/metrics``
(:mod:`.metrics`), the ``serve`` command's start-up (:mod:`.launch`), and one-shot generation for ``dflashbench
generate`` (:mod:`.oneshot`)."""
