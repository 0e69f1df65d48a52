"""The history page in a real headless Chromium (driven as tests/report/test_browser.py drives the report): it
renders one plot per series, laid out at a real size, asks nothing of the network, runs no script, and its run
links point at the runs. The screenshot is kept beside the test's files (``history.png``)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
from gate.history_factory import write_run
from report.test_browser import CHROMIUM, chromium_page, png_size
from typer.testing import CliRunner

from dflashbench.cli import app

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed: apt-get install -y chromium")]  # fmt: skip

FACTS = """JSON.stringify({
  title: document.title,
  images: [...document.images].map(i => ({complete: i.complete, w: i.naturalWidth, h: i.naturalHeight,
                                          shown: i.getBoundingClientRect().width})),
  scripts: document.scripts.length,
  links: [...document.querySelectorAll('.runs a')].map(a => a.href),
  changed: document.querySelectorAll('.runs a.changed').length,
  summary: document.querySelector('.summary').innerText,
})"""


async def shoot(page: Path, profile: Path, shot: Path) -> dict:
    async with chromium_page(profile) as (tools, page_proxy, _background):
        await tools.send("Network.enable")
        await tools.send("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1,
                         mobile=False)  # fmt: skip
        await tools.navigate(page.as_uri())
        facts = json.loads(await tools.evaluate(FACTS))
        capture = await tools.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        shot.write_bytes(base64.b64decode(capture["data"]))
        await asyncio.sleep(0.3)
        facts["urls"] = tools.requested_urls()
        facts["proxy"] = list(page_proxy.requests)
        return facts


def test_history_page_in_headless_chromium(tmp_path):
    for night in range(1, 17):  # enough runs for a step in the newest 3 to be judged: exit 0, not 3
        write_run(tmp_path / "runs", night, factor={"dflash": 0.8 if night >= 9 else 1.0}, loads=(1,))
    page = tmp_path / "history.html"
    result = CliRunner().invoke(app, ["history", str(tmp_path / "runs"), "-o", str(page)])
    assert result.exit_code == 0, result.output
    facts = asyncio.run(shoot(page, tmp_path / "profile", tmp_path / "history.png"))
    assert facts["title"] == "dflashbench history"
    assert len(facts["images"]) == 15  # 3 speedups + 3 methods x 4 figures at the one load
    for img in facts["images"]:
        assert img["complete"] and img["w"] >= 350 and img["h"] >= 180 and img["shown"] >= 300, img
    assert facts["scripts"] == 0
    assert all(u.startswith(("file://", "data:")) for u in facts["urls"]) and facts["proxy"] == []
    assert len(facts["links"]) == 15 * 16 and facts["changed"] >= 3
    assert all(link.startswith((tmp_path / "runs").as_uri()) for link in facts["links"])
    assert "DFlash vs AR speedup at c=1 fell" in facts["summary"] and "from run 9" in facts["summary"]
    width, height = png_size((tmp_path / "history.png").read_bytes())
    assert width >= 1300 and height > 1500  # the whole page (less a scrollbar): summary, the grid of plots, the runs
