import pytest

from .factory import point, request, write_run

# What a hostile dataset or server could put in front of a reader: a prompt echoed in an error message,
# a category name, a model name with Markdown table syntax.
SCRIPT = "<script>window.__pwned = 1</script>"
PROMPT_ERROR = f"HTTP 400 from server: prompt {SCRIPT!s} is too long"
HOSTILE_CATEGORY = "<img src=x onerror=alert(1)> costs $x^$"  # "$x^$": broken mathtext for matplotlib
PIPE_MODEL = "org/model|v2"


def sample_points(run_id="run", backend="reference", speed=3.0, model="tiny"):
    """AR and DFlash at concurrency 1, 2, 4, 8 on two categories and "all": DFlash `speed` times faster per
    user, a little less throughput gain at high concurrency, so frontiers overlap in interactivity."""
    points = []
    for method, gain in (("ar", 1.0), ("dflash", speed)):
        for c in (1, 2, 4, 8):
            for category in ("all", "math", HOSTILE_CATEGORY):
                per_user = 40.0 * gain / c ** (0.25 if method == "ar" else 0.6)
                points.append(point(
                    method, c, per_user, per_user * c, category=category, run_id=run_id, backend=backend,
                    model=model, tpot_s_mean=1 / per_user, tpot_s_p50=1 / per_user, ttft_s_p99=0.05 * c,
                    tau=None if method == "ar" else 3.2 + 0.1 * (category == "math"), output_tokens=800,
                    accepted_per_pos_rate=() if method == "ar" else (0.85, 0.6, 0.4, 0.25),
                ))  # fmt: skip
    return points


def sample_requests(run_id="run"):
    reqs = [request(m, c, i, tpot_s=0.01 * c / (3 if m == "dflash" else 1), ttft_s=0.02 * c, run_id=run_id)
            for m in ("ar", "dflash") for c in (1, 2, 4, 8) for i in range(6)]  # fmt: skip
    reqs.append(request("dflash", 1, 99, ok=False, error=PROMPT_ERROR, run_id=run_id))
    return reqs


def sample_telemetry():
    return [{"t_s": i * 0.1, "unix_s": 1.7e9 + i * 0.1, "gpu": g, "power_w": 300.0 + 5 * g + i % 7,
             "gpu_util_pct": 90.0 - g, "energy_mj": None} for i in range(40) for g in (0, 1)]  # fmt: skip


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory):
    """A run directory (read-only for the tests)."""
    return write_run(
        tmp_path_factory.mktemp("results"), sample_points("run-a"), sample_requests("run-a"), telemetry=sample_telemetry(),
        run_id="run-a",
        manifest={"suite": {"name": "demo", "version": 1, "description": f"a suite whose description says {SCRIPT}"},
                  "backend": "reference", "model": PIPE_MODEL, "drafts": {"dflash": "embedded"},
                  "gpu": {"gpu": "no NVIDIA GPU", "gpu_count": 0}},
    )  # fmt: skip


@pytest.fixture(scope="session")
def sample_html(sample_run, tmp_path_factory) -> str:
    """The HTML report of ``sample_run``, rendered once (figures take seconds on a small CPU)."""
    from dflashbench.report import write_report

    return write_report([sample_run], tmp_path_factory.mktemp("reports") / "sample.html").read_text()
