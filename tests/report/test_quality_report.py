"""The report's quality figures: agreement with AR and task accuracy beside the speedups, and the warnings a
planted fault must raise (hand-made runs, written through the real RunStore, rendered as Markdown and HTML)."""

from __future__ import annotations

import dataclasses

from dflashbench.load.outputs import output_fields
from dflashbench.report import render_report

from .factory import point, request, write_run

TEXTS = [f"Step {i}: {i} + {i} = {2 * i}.\nThe answer is \\boxed{{{2 * i}}}." for i in range(8)]


def with_output(r, text):
    return dataclasses.replace(r, **output_fields(text, None, store_text=True))


def quality_run(root, *, dflash_texts=TEXTS, dflash_correct=28, temperature=0.0, run_id="q"):
    points, requests = [], []
    for method, texts, correct in (("ar", TEXTS, 28), ("dflash", dflash_texts, dflash_correct)):
        for c in (1, 2):
            points.append(point(method, c, 40.0 * (3 if method == "dflash" else 1) / c, 40.0 * c, run_id=run_id,
                                tpot_s_mean=0.01, tpot_s_p50=0.01, num_graded=32, num_correct=correct,
                                accuracy=correct / 32))  # fmt: skip
            requests += [with_output(request(method, c, i, run_id=run_id), t) for i, t in enumerate(texts)]
    manifest = {"suite_config": {"temperature": temperature}, "backend": "reference", "model": "tiny"}
    return write_run(root, points, requests, manifest=manifest, run_id=run_id)


def test_lossless_run_shows_full_agreement_and_no_warning(tmp_path):
    md, _ = render_report([quality_run(tmp_path)], fmt="md")
    assert "Warnings" not in md
    assert "| agreement with AR | accuracy AR → method |" in md
    assert "| 100.0% (8/8) | 87.5% → 87.5% |" in md  # beside the single-stream and matched-concurrency speedups
    html, _ = render_report([quality_run(tmp_path, run_id="q2")], fmt="html")
    assert "<h3>Agreement with AR</h3>" in html and "<h3>Task accuracy</h3>" in html
    assert 'id="warnings"' not in html


def test_planted_fault_shows_as_disagreement_and_warnings(tmp_path):
    broken = [t.replace("= 6", "= 7") for t in TEXTS]  # one answer of eight comes out different
    run = quality_run(tmp_path, dflash_texts=broken, dflash_correct=12)
    md, _ = render_report([run], fmt="md")
    assert "**Warnings**" in md
    assert ("DFlash output differs from AR on 1 of 8 requests on synthetic (reference), c=1 (agreement 87.5%), "
            "while AR agreed with itself across concurrencies on every request (8/8); first divergence at "
            "character 16") in md  # fmt: skip
    assert "DFlash accuracy falls below AR's beyond noise on synthetic (reference), c=1: 37.5% (12/32) vs AR 87.5%" in md
    assert "| 87.5% (7/8) | 87.5% → 37.5% ⚠ |" in md
    html, _ = render_report([run], fmt="html")
    assert 'id="warnings"' in html and "BELOW AR beyond noise" in html


def test_sampled_run_reports_accuracy_only_and_says_so(tmp_path):
    broken = [t + " (sampled)" for t in TEXTS]
    md, _ = render_report([quality_run(tmp_path, dflash_texts=broken, temperature=0.7)], fmt="md")
    assert "sampled, so agreement with AR is not reported" in md
    assert "differs from AR" not in md and "agreement with AR |" not in md
    assert "87.5% → 87.5%" in md
