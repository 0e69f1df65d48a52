"""Contract check: every server argv dflashbench builds must parse with the engine's OWN argument parser.

Run inside an environment where the engine is installed (the ``engines`` nox session does that):

    python tests/engines/check_argv.py vllm|sglang|trtllm

It prints the engine version, then one verdict per argv (every method x a grid of parallelism, ports,
served names, draft settings and extra user arguments), plus a negative control: a flag the engine does not
know must be refused, or the check would prove nothing. Exit status 0 when every verdict is PASS.
The engines need no GPU for this: each parser is built the way the engine's own CLI builds it, without
starting anything (see the per-engine functions for the module paths, looked up in the installed version).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # dflashbench from this checkout; the engine's env need not install it

from dflashbench.backends import get_backend  # noqa: E402
from dflashbench.backends.base import ServerSpec  # noqa: E402
from dflashbench.backends.kv_report import SGLANG_RESOLVES  # noqa: E402
from dflashbench.methods import record  # noqa: E402
from dflashbench.plan.gpus import ARCHES, GpuPlan  # noqa: E402
from dflashbench.plan.models import registry  # noqa: E402
from dflashbench.plan.pairing import resolve, server_spec  # noqa: E402
from dflashbench.plan.suite_overrides import apply_overrides  # noqa: E402
from dflashbench.plan.suites import load_suite  # noqa: E402
from dflashbench.reference.draft_length import DraftSchedule  # noqa: E402
from dflashbench.types import Method  # noqa: E402

MODEL = "Qwen/Qwen3-8B"
DRAFTS = {Method.DFLASH: "z-lab/Qwen3-8B-DFlash-b16", Method.EAGLE3: "RedHatAI/Qwen3-8B-speculator.eagle3",
          Method.DFLASH2: "z-lab/Qwen3.8-27B-DFlash2"}
BLOCKS = {Method.DFLASH: 16, Method.DFLASH2: 8}  # what the model registry knows of those drafters
EXTRA = {
    "vllm": ("--gpu-memory-utilization", "0.85"),
    "sglang": ("--mem-fraction-static", "0.8"),
    "trtllm": ("--kv_cache_free_gpu_memory_fraction", "0.8"),
}
# Above every engine's default, so each backend emits its running-request flag (vLLM only above its own).
MAX_RUNNING_REQUESTS = 512
ENGINE_CONFIG = {"trtllm": {"enable_attention_dp": True}}  # the YAML key trtllm-serve has instead of --dp
UNKNOWN_FLAG = "--definitely-not-a-flag"


class Refused(Exception):
    """The engine's parser rejected the argv."""


def specs(engine: str, local_draft: str) -> list[tuple[str, ServerSpec]]:
    """Every method, plus parallelism / naming / extra-argument variations, as the sweep would build them."""
    out = []
    for method in Method:
        if not record(method).runs_on(engine):  # dflashbench refuses it before launch (tests/backends cover that)
            continue
        draft = DRAFTS.get(method)
        block = BLOCKS.get(method)
        out.append((f"{method.value}", ServerSpec(method=method, model=MODEL, draft=draft, draft_block_size=block)))
        par = {"tp": 4, "dp": 1, "ep": 4} if engine == "trtllm" else {"tp": 2, "dp": 2, "ep": 4}
        out.append(
            (
                f"{method.value} tp/dp/ep, port, name, running-request cap, extra args",
                ServerSpec(
                    method=method,
                    model=MODEL,
                    draft=draft,
                    draft_block_size=block,
                    port=18123,
                    served_model_name="bench-model",
                    max_running_requests=MAX_RUNNING_REQUESTS,
                    extra_args=EXTRA[engine],
                    engine_config=ENGINE_CONFIG.get(engine, {}),
                    **par,
                ),
            )
        )
        if record(method).needs_draft:  # the draft-free methods and MTP take no --draft
            out.append(
                (
                    f"{method.value} local draft dir / explicit length",
                    ServerSpec(
                        method=method,
                        model=MODEL,
                        draft=local_draft,
                        num_speculative_tokens=None if method in BLOCKS else 5,
                    ),
                )
            )
    if engine == "vllm":  # a recipe's drafter tp (vllm-project/recipes gpt-oss-120b: draft_tensor_parallel_size 1)
        out.append(("eagle3 target tp 2, draft tp 1",
                    ServerSpec(method=Method.EAGLE3, model=MODEL, draft=DRAFTS[Method.EAGLE3], tp=2, draft_tp=1,
                               num_speculative_tokens=7)))  # fmt: skip
    if engine in ("vllm", "trtllm"):  # a tuned draft-length schedule (dflashbench tune), in each engine's own form
        schedule = DraftSchedule.parse("[[1,1,7],[2,8,3],[9,64,1]]")
        for method in (Method.DFLASH, Method.EAGLE3, Method.MTP):
            if record(method).runs_on(engine):
                out.append((f"{method.value} draft-length schedule {schedule.to_json()}",
                            ServerSpec(method=method, model=MODEL, draft=DRAFTS.get(method), draft_block_size=BLOCKS.get(method),
                                       draft_schedule=schedule, max_running_requests=MAX_RUNNING_REQUESTS)))  # fmt: skip
    if engine == "sglang":  # a drafter the registry does not know: the block size is left to SGLang
        out.append(("dflash hub drafter, block unknown",
                    ServerSpec(method=Method.DFLASH, model=MODEL, draft=DRAFTS[Method.DFLASH])))  # fmt: skip
    return out


def registry_specs(engine: str) -> list[tuple[str, ServerSpec]]:
    """Every model registry entry, every method it plans, on every GPU architecture a recipe is bound to, exactly
    as `dflashbench sweep --backend ENGINE --model NAME --gpu 8x<gpu>` builds it (the default suite, the registry's
    drafts, recipe flags and tp on an 8-GPU node of that architecture, so every entry fits)."""
    out = []
    memory = {"hopper": 141.0, "blackwell": 180.0}  # H200, B200
    for entry in registry().models:
        # TensorRT-LLM plans DFlash without a known block too (max_draft_len left out, read from the checkpoint)
        suite = apply_overrides(load_suite("default"), backend=engine, model=entry.name)
        arches = ARCHES if entry.recipes.get(engine) and entry.recipes[engine].gpu else ARCHES[:1]
        for arch in arches:
            gpus = GpuPlan(arch.upper(), arch, memory[arch], 8, "--gpu")
            resolved, pair = resolve(suite, gpus=gpus)
            for method in resolved.methods:
                out.append((f"registry {entry.name} {arch} {method.value}",
                            server_spec(resolved, method, pair, port=18124)))  # fmt: skip
    return out


def schedule_specs(engine: str) -> list[tuple[str, ServerSpec]]:
    """The tuned schedule for gpt-oss-120b exactly as `dflashbench sweep --backend ENGINE --model gpt-oss-120b --method
    dflash,dflash-tuned --schedule FILE --dry-run` builds it (the default suite, the registry's drafter and recipe, on
    8 H200s): issue #66's "the vLLM argv of a tuned schedule for gpt-oss-120b"."""
    if engine == "sglang":  # SGLang has no K by batch size: dflashbench refuses the schedule (tests/backends)
        return []
    ranges = [[1, 1, 9], [2, 8, 5], [9, 512, 3]]  # within gpt-oss-120b's DFlash block of 10
    suite = apply_overrides(load_suite("default"), backend=engine, model="gpt-oss-120b", methods=["dflash", "dflash-tuned"],
                            schedules={"dflash-tuned": ranges})  # fmt: skip
    resolved, pair = resolve(suite, gpus=GpuPlan("H200", "hopper", 141.0, 8, "--gpu"))
    return [(f"gpt-oss-120b {m.value}", server_spec(resolved, m, pair, port=18125)) for m in resolved.methods]


# Servers across nodes (issue #67): each node's argv as the sweep builds it, with a leader address in place of the one
# the scheduler gives (a Slurm script's variable, LeaderWorkerSet's $(LWS_LEADER_ADDRESS)).
LEADER_ADDRESS = "10.0.0.1"
ACROSS_NODES = (("glm-5.3", "blackwell", 180.0, ("ar", "dflash2", "mtp")),
                ("qwen3.5-397b-a17b", "hopper", 141.0, ("ar", "dflash", "mtp")))  # 2 x 8 x B200, 2 x 8 x H200


def node_specs(engine: str) -> list[tuple[str, ServerSpec]]:
    """Every node of a two-node server: a hand-made one (vLLM tp 8 x pp 2, SGLang tp 16), and GLM-5.3 on 2 x 8 x B200
    and Qwen3.5-397B-A17B on 2 x 8 x H200 exactly as `dflashbench sweep --backend ENGINE --model NAME --gpu
    2x8x<gpu> --cluster slurm` plans them (the memory plan's tp, pp and nodes)."""
    import dataclasses

    if engine not in ("vllm", "sglang"):
        return []
    out = []
    layout = {"tp": 8, "pp": 2} if engine == "vllm" else {"tp": 16}
    base = ServerSpec(method=Method.DFLASH, model=MODEL, draft=DRAFTS[Method.DFLASH], draft_block_size=16, nnodes=2,
                      leader_host=LEADER_ADDRESS, host="0.0.0.0", **layout)  # fmt: skip
    out += [(f"dflash across 2 nodes, node {r}", dataclasses.replace(base, node_rank=r)) for r in range(2)]
    for name, arch, memory, methods in ACROSS_NODES:
        suite = apply_overrides(load_suite("default"), backend=engine, model=name, methods=",".join(methods),
                                cluster="slurm")  # fmt: skip
        gpus = GpuPlan(arch.upper(), arch, memory, 8, "--gpu", nodes=2)
        resolved, pair = resolve(suite, gpus=gpus)
        for method in resolved.methods:
            spec = server_spec(resolved, method, pair, port=18125)
            if spec.nnodes < 2:
                raise SystemExit(f"{name} on 2 x 8 x {arch}: planned on one node, not across two: the plan changed")
            for rank in range(spec.nnodes):
                out.append((f"registry {name} 2 x 8 x {arch} {method.value} node {rank}",
                            dataclasses.replace(spec, node_rank=rank, leader_host=LEADER_ADDRESS)))  # fmt: skip
    return out


def mamba_names_check(check, version: str) -> list[tuple[str, bool, str]]:
    """SGLang only: each mamba radix-cache option name parses exactly where dflashbench says this release takes it
    (dflashbench.backends.sglang.mamba_option_names), and both spellings of the choice it passes exist."""
    from dflashbench.backends.sglang import MAMBA_NEW_NAME, MAMBA_OLD_NAME, mamba_option_names

    accepted = mamba_option_names(version)
    out = []
    plan = get_backend("sglang").launch_plan
    for name in (MAMBA_OLD_NAME, MAMBA_NEW_NAME):
        argv = plan(ServerSpec(method=Method.AR, model=MODEL, extra_args=(name, "extra_buffer"))).argv
        try:
            check(argv)
            parsed = True
        except Refused:
            parsed = False
        want = name in accepted
        out.append((f"{name} extra_buffer {'accepted' if parsed else 'refused'} (dflashbench expects it "
                    f"{'accepted' if want else 'refused'} on {version})", parsed == want, shlex.join(argv)))  # fmt: skip
    return out


# --- vLLM ---


def vllm_checker() -> Callable[[tuple[str, ...]], str]:
    """``vllm serve``'s parser, built as vllm/entrypoints/cli/main.py builds it, on the CPU platform."""
    import typing

    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()  # no GPU here: the parser only needs a platform
    import vllm.entrypoints.cli.serve as serve_cli
    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    commands = {}
    for cmd in serve_cli.cmd_init():
        cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
        commands[cmd.name] = cmd
    methods = set(typing.get_args(SpeculativeMethod))
    fields = set(getattr(SpeculativeConfig, "__dataclass_fields__", {})) or set(
        getattr(SpeculativeConfig, "model_fields", {})
    )

    def check(argv: tuple[str, ...], model: str = MODEL) -> str:
        if argv[:2] != ("vllm", "serve"):
            raise Refused(f"not a 'vllm serve' command: {argv[:2]}")
        args = _parse(parser, argv[1:])
        commands["serve"].validate(args)
        if args.model_tag != model:
            raise Refused(f"model parsed as {args.model_tag!r}")
        config = args.speculative_config
        if config is not None:
            if not isinstance(config, dict):
                raise Refused(f"--speculative-config parsed as {type(config).__name__}, not a dict")
            if config.get("method") not in methods:
                raise Refused(
                    f"speculative method {config.get('method')!r} not in this vLLM's SpeculativeMethod"
                )
            unknown = set(config) - fields
            if unknown:
                raise Refused(f"SpeculativeConfig has no field(s) {sorted(unknown)}")
            if "num_speculative_tokens_per_batch_size" in config:  # vLLM's own schedule check and lookup
                from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

                ranges, cap, seqs = (config["num_speculative_tokens_per_batch_size"], config["num_speculative_tokens"],
                                     args.max_num_seqs or 256)  # fmt: skip
                try:
                    dense = build_dynamic_sd_schedule_lookup(ranges, seqs, cap)
                except (ValueError, TypeError) as exc:
                    raise Refused(f"num_speculative_tokens_per_batch_size: {exc}") from None
                if hasattr(dense, "dense"):  # later releases: a (batch size x context bucket) table; [lo, hi, K] has one
                    dense = [row[0] if row else 0 for row in dense.dense]
                ours = DraftSchedule.parse(ranges)  # the reference server's lookup must be vLLM's own
                wrong = [b for b in range(1, seqs + 1) if dense[b] != ours.k_at(b, cap)]
                if wrong:
                    raise Refused(f"dflashbench's K at batch size {wrong[0]} is {ours.k_at(wrong[0], cap)}, vLLM's {dense[wrong[0]]}")
            if "attention_backend" in config:  # the drafter's own backend: an AttentionBackendEnum name
                try:
                    SpeculativeConfig._parse_attention_backend(config["attention_backend"])
                except (KeyError, ValueError, AttributeError) as exc:
                    raise Refused(f"draft attention_backend {config['attention_backend']!r}: {exc!r}") from None
        return (
            f"tp={args.tensor_parallel_size} pp={args.pipeline_parallel_size} nnodes={args.nnodes} "
            f"node_rank={args.node_rank} master_addr={args.master_addr} headless={args.headless} "
            f"dp={args.data_parallel_size} max_num_seqs={args.max_num_seqs} "
            f"attention_backend={args.attention_backend} spec={config}"
        )

    return check


# --- SGLang ---


def sglang_checker() -> Callable[[tuple[str, ...]], str]:
    """``sglang serve``'s parser: sglang/cli/serve.py hands the arguments after ``serve`` to
    ``prepare_server_args``, i.e. argparse + ``ServerArgs.add_cli_args`` (sglang/srt/server_args.py).
    The algorithm name, a free string there, must name a ``SpeculativeAlgorithm``."""
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)

    def check(argv: tuple[str, ...], model: str = MODEL) -> str:
        if argv[:2] != ("sglang", "serve"):
            raise Refused(f"not a 'sglang serve' command: {argv[:2]}")
        args = _parse(parser, argv[2:])
        if args.model_path != model:
            raise Refused(f"model parsed as {args.model_path!r}")
        algo = args.speculative_algorithm
        # NEXTN (MTP) is a name SGLang resolves to EAGLE before it looks the algorithm up (SGLANG_RESOLVES)
        if algo is not None and SGLANG_RESOLVES.get(algo, algo) not in SpeculativeAlgorithm.__members__:
            raise Refused(f"speculative algorithm {algo!r} is not one of this SGLang's SpeculativeAlgorithm")
        if not args.enable_metrics:
            raise Refused("--enable-metrics missing: no acceptance counters on /metrics")
        mamba = getattr(args, "mamba_radix_cache_strategy", getattr(args, "mamba_scheduler_strategy", None))
        return (
            f"mamba={mamba} attention={args.attention_backend} "
            f"tp={_first(args, 'tp_size', 'tensor_parallel_size')} dp={_first(args, 'dp_size', 'data_parallel_size')} "
            f"ep={_first(args, 'ep_size', 'expert_parallel_size')} nnodes={args.nnodes} node_rank={args.node_rank} "
            f"dist_init_addr={args.dist_init_addr} algo={algo} "
            f"draft_tokens={args.speculative_num_draft_tokens} steps={args.speculative_num_steps} "
            f"topk={args.speculative_eagle_topk} max_running_requests={args.max_running_requests}"
        )

    return check


# --- TensorRT-LLM ---


def trtllm_checker() -> Callable[[tuple[str, ...]], str]:
    """``trtllm-serve``'s click group (tensorrt_llm/commands/serve.py) + the LLM-API YAML as TorchLlmArgs."""
    from tensorrt_llm.commands.serve import main as cli
    from tensorrt_llm.llmapi.llm_args import TorchLlmArgs, update_llm_args_with_extra_dict

    def check(argv: tuple[str, ...], files: dict[str, str], model: str = MODEL) -> str:
        import click
        import yaml

        if argv[0] != "trtllm-serve":
            raise Refused(f"not a trtllm-serve command: {argv[0]}")
        try:
            ctx = cli.make_context("trtllm-serve", list(argv[1:]), resilient_parsing=False)
            name, cmd, rest = cli.resolve_command(ctx, [*ctx.protected_args, *ctx.args])
            sub = cmd.make_context(name, rest, parent=ctx)
        except click.exceptions.ClickException as exc:
            raise Refused(exc.format_message()) from None
        params = sub.params
        config_path = params.get("config") or params.get("extra_llm_api_options")
        options = yaml.safe_load(files[config_path])
        merged = update_llm_args_with_extra_dict({"model": params.get("model", model)}, options)
        TorchLlmArgs(**merged)  # pydantic: unknown keys and bad speculative_config values are errors
        return (
            f"{name}: tp={params.get('tp_size') or params.get('tensor_parallel_size')} "
            f"max_batch_size={params.get('max_batch_size')} yaml={options}"
        )

    return check


def _first(args, *names: str):
    """The first of ``names`` the parsed namespace has (SGLang renamed dests between releases, e.g. 0.5.13's
    ``--tp-size`` is ``tensor_parallel_size``)."""
    return next((getattr(args, n) for n in names if hasattr(args, n)), None)


def _parse(parser, args):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return parser.parse_args(list(args))
        except SystemExit as exc:
            raise Refused(f"exit {exc.code}: {err.getvalue().strip().splitlines()[-1:]}") from None


CAP_FLAG = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests", "trtllm": "--max_batch_size"}


def missing_flags(engine: str, spec: ServerSpec, argv: tuple[str, ...], backend) -> str | None:
    """What the argv should carry for ``spec`` but does not: the running-request cap (where the engine's own
    default would be lower than asked: vLLM's is 256), and vLLM's drafter-only attention backend (on the vLLM
    installed here, which the backend built the argv for)."""
    cap = backend.concurrency_cap(spec)
    short = cap is None or cap < spec.max_running_requests if spec.max_running_requests else False
    if spec.max_running_requests and CAP_FLAG[engine] not in argv and short:
        return f"{CAP_FLAG[engine]} missing for max_running_requests={spec.max_running_requests}"
    if engine == "vllm" and spec.method is Method.DFLASH:
        from dflashbench.backends.vllm import dflash_attention, installed_vllm_version

        config = json.loads(argv[argv.index("--speculative-config") + 1])
        if dflash_attention(installed_vllm_version()) == "draft" and "attention_backend" not in config:
            return "drafter-only attention_backend missing from --speculative-config"
    return None


CHECKERS = {
    "vllm": ("vllm", vllm_checker),
    "sglang": ("sglang", sglang_checker),
    "trtllm": ("tensorrt_llm", trtllm_checker),
}


def main(engine: str) -> int:
    dist, make_checker = CHECKERS[engine]
    version = importlib.metadata.version(dist)
    print(f"{engine}: {dist} {version}, python {sys.version.split()[0]}")
    check = make_checker()
    backend = get_backend(engine)
    failures = extra_checks = 0
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(
            json.dumps({"block_size": 10, "dflash_config": {"mask_token_id": 1}})
        )
        cases = specs(engine, tmp) + registry_specs(engine) + schedule_specs(engine) + node_specs(engine)
        for label, spec in cases:
            plan = backend.launch_plan(spec)
            try:
                detail = (check(plan.argv, plan.files, model=spec.model) if engine == "trtllm"
                          else check(plan.argv, model=spec.model))  # fmt: skip
                gap = missing_flags(engine, spec, plan.argv, backend)
                if gap:
                    raise Refused(gap)
                verdict = f"PASS  {detail}"
            except Refused as exc:
                failures += 1
                verdict = f"FAIL  {exc}"
            print(f"[{label}] {shlex.join(plan.argv)}\n    {verdict}")
        if engine == "sglang":
            for label, ok, argv in mamba_names_check(check, version):
                failures += 0 if ok else 1
                extra_checks += 1
                print(f"[mamba option] {argv}\n    {'PASS' if ok else 'FAIL'}  {label}")
        # negative control: the same parser must refuse a flag it does not know
        plan = backend.launch_plan(ServerSpec(method=Method.AR, model=MODEL, extra_args=(UNKNOWN_FLAG,)))
        try:
            check(plan.argv, plan.files) if engine == "trtllm" else check(plan.argv)
            failures += 1
            print(f"[negative control] {UNKNOWN_FLAG} was ACCEPTED: this check cannot detect bad flags  FAIL")
        except Refused as exc:
            print(f"[negative control] {UNKNOWN_FLAG} refused as it should be ({exc})  PASS")
    total = len(cases) + extra_checks + 1
    print(f"{engine} {version}: {total - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("engine", choices=sorted(CHECKERS))
    sys.exit(main(cli.parse_args().engine))
