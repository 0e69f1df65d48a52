"""What ``dflashbench serve`` runs, checked when it is made: a bad value fails in one line naming its option,
before the slow imports and the model load (:func:`~dflashbench.reference.serving.launch.serve` takes it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dflashbench.errors import UserError

METHODS = ("ar", "dflash", "eagle3", "ngram")
# Where ``dflashbench serve`` reads the API key it requires (or --api-key-file): never its command line.
API_KEY_ENV = "DFLASHBENCH_API_KEY"
DRAFT_KIND = {"dflash": "a DFlash drafter", "eagle3": "an EAGLE-3 head"}
DRAFT_FREE = ("ar", "ngram")  # no draft checkpoint
# n-gram drafting's defaults: vLLM's documented ones (dflashbench/data/methods.toml), so tau compares
NGRAM_K, NGRAM_MIN_N, NGRAM_MAX_N = 5, 4, 4


@dataclass(frozen=True)
class ServeConfig:
    """One reference server: the model pair, the method, where it listens and how it batches.

    ``model``/``draft`` are directories or ``random:SHAPE`` specs (random weights in a released model's shape);
    an ``ar`` server has no draft (a given one is dropped)."""

    model: str
    draft: str | None
    method: str = "dflash"
    host: str = "127.0.0.1"
    port: int = 8000
    device: str = "cpu"
    dtype: str | None = None
    max_batch_size: int = 8
    max_kv_tokens: int | None = None
    served_model_name: str | None = None
    threads: int = 1  # torch CPU threads for decoding
    pin_decode_cpu: bool = True
    fault: str | None = None  # tests only: a planted decoding bug (see reference.decode.FAULTS)
    step_delay_s: float = 0.0  # tests only: a sleep after every decode step (a slower server)
    step_delay_per_request_s: float = 0.0  # tests only: a sleep per request in the step's batch (cost grows with load)
    step_stretch: float = 1.0  # tests only: every step takes this many times its own time (every method alike)
    # tests only (the lossless check's): in the verify pass, commit the runner-up where the target's top-1 leads it by
    # less than this many nats (a planted near-tie flip), and accept any draft among the target's top k (a planted
    # loose verifier); reference.decode.Planted
    test_near_tie_nats: float = 0.0
    test_loose_verify_topk: int = 0
    model_label: str | None = None  # what the load line calls the model and the draft (default: as given)
    draft_label: str | None = None
    # draft tokens verified per step (any drafting method; default: the drafter's own, n-gram NGRAM_K), and K by batch
    # size, vLLM's num_speculative_tokens_per_batch_size as JSON (reference/draft_length.py); with both, K is capped
    num_speculative_tokens: int | None = None
    num_speculative_tokens_per_batch_size: str | None = None
    prompt_lookup_min: int = NGRAM_MIN_N
    prompt_lookup_max: int = NGRAM_MAX_N
    # the key clients must send (Authorization: Bearer KEY on /v1/...), read from DFLASHBENCH_API_KEY or
    # --api-key-file, never from the command line, where ps shows it to every user of the machine
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", str(self.method).strip().lower())  # a Method is a str too
        if self.method not in METHODS:
            raise UserError(f"unknown method {self.method!r} for serve; choose {', '.join(METHODS)}")
        if not 0 < self.port < 65536:
            raise UserError(f"--port must be 1..65535, got {self.port}")
        for flag, value in (("--max-batch-size", self.max_batch_size), ("--max-kv-tokens", self.max_kv_tokens),
                            ("--threads", self.threads)):  # fmt: skip
            if value is not None and value < 1:
                raise UserError(f"{flag} must be >= 1, got {value}")
        if self.fault is not None:
            from dflashbench.reference.decode import FAULTS

            if self.fault not in FAULTS:
                raise UserError(f"unknown --test-fault {self.fault!r}; choose one of: {', '.join(FAULTS)}")
        if not self.test_near_tie_nats >= 0 or self.test_near_tie_nats == float("inf"):
            raise UserError(f"--test-near-tie-nats must be a finite number >= 0, got {self.test_near_tie_nats}")
        if self.test_loose_verify_topk < 0:
            raise UserError(f"--test-loose-verify-topk must be >= 0, got {self.test_loose_verify_topk}")
        self._check_draft_length()
        if self.method == "ngram" and not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise UserError(f"n-gram sizes need 1 <= --prompt-lookup-min <= --prompt-lookup-max, got "
                            f"{self.prompt_lookup_min} and {self.prompt_lookup_max}")  # fmt: skip
        if self.method in DRAFT_FREE:
            object.__setattr__(self, "draft", None)
        elif self.draft is None:
            raise UserError(f"--method {self.method} needs --draft DIR ({DRAFT_KIND[self.method]} for this model)")
        self._check_pair()

    @property
    def planted(self):
        """The test switches as the decoder takes them (``None``: nothing planted, the default)."""
        from dflashbench.reference.decode import Planted

        planted = Planted(self.test_near_tie_nats, self.test_loose_verify_topk)
        return planted if planted.any else None

    def _check_draft_length(self) -> None:
        given = self.num_speculative_tokens is not None or self.num_speculative_tokens_per_batch_size is not None
        if given and self.method == "ar":
            raise UserError("--method ar drafts nothing: drop --num-speculative-tokens and "
                            "--num-speculative-tokens-per-batch-size")  # fmt: skip
        if self.num_speculative_tokens is not None and self.num_speculative_tokens < 1:
            raise UserError(f"--num-speculative-tokens must be >= 1, got {self.num_speculative_tokens}")
        self.draft_schedule()  # a bad schedule fails here, naming the flag

    def draft_schedule(self):
        """The :class:`~dflashbench.reference.draft_length.DraftSchedule` the engine verifies by: the schedule (its K
        capped at ``--num-speculative-tokens``), else the one K, else ``None`` (the drafter's own length)."""
        from dflashbench.reference.draft_length import DraftSchedule

        k, text = self.num_speculative_tokens, self.num_speculative_tokens_per_batch_size
        if text is None:
            return DraftSchedule.fixed(k) if k is not None else None
        try:
            schedule = DraftSchedule.parse(text)
        except ValueError as exc:
            raise UserError(f"--num-speculative-tokens-per-batch-size: {exc} (e.g. '[[1,1,7],[2,4,3],[5,64,1]]')") from None
        if k is not None:
            schedule = DraftSchedule(tuple((lo, hi, min(n, k)) for lo, hi, n in schedule.ranges))
        return schedule

    def _check_pair(self) -> None:
        from dflashbench.reference.random_pair import is_random, shape_of

        for label, path in (("model", self.model), ("draft", self.draft)):
            if is_random(path):
                shape_of(path)  # a bad shape fails here, before the slow imports
            elif path is not None and not Path(path).is_dir():
                raise UserError(f"--{label} {path}: no such directory (or random:SHAPE for random weights)")
        if self.draft is not None and is_random(self.draft) != is_random(self.model):
            raise UserError("random:SHAPE drafts pair only with a random:SHAPE target of the same shape")
