"""Write the README's picture of a run again from its committed run: the verdict block as a terminal 100 columns
wide prints it, and the Pareto figure as a PNG that records the run it came from.

    python tools/readme_example.py           # write README.md's block and the PNG (nox -s examples runs this too)
    python tools/readme_example.py --check   # exit 1, naming what is stale, where either differs from today's

Which run, and where the PNG goes: the ``[readme]`` table of reports/examples.toml. Run it after a change to the
verdict or the report, and commit README.md and the PNG. tests/report/test_committed_examples.py fails until then.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from pathlib import Path

from dflashbench.report import snapshot

ROOT = Path(__file__).resolve().parents[1]
BLOCK = "verdict"  # README.md: <!-- verdict --> ```text ... ``` <!-- /verdict -->


def readme_config(root: Path = ROOT) -> dict[str, str]:
    return tomllib.loads((root / "reports" / "examples.toml").read_text())["readme"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 where README.md is stale")
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # the run is named relative to the project, as the README and the PNG name it
    config = readme_config()
    readme = Path(config["readme"])
    text = readme.read_text()
    body = "\n".join(snapshot.terminal_lines([config["run"]])) + "\n"
    if args.check:
        stale = [] if snapshot.read_block(text, BLOCK) == body else [f"{readme}'s verdict block"]
        png = Path(config["pareto_png"])
        recorded = snapshot.png_text(png) if png.is_file() else {}
        if (recorded.get(snapshot.SOURCE_KEY), recorded.get(snapshot.POINTS_KEY)) != (
                config["run"], snapshot.points_digest(config["run"])):  # fmt: skip
            stale.append(f"{png} (drawn from another run, or missing)")
        for what in stale:
            print(f"{what} is not today's rendering of {config['run']}: run python tools/readme_example.py",
                  file=sys.stderr)  # fmt: skip
        return 1 if stale else 0
    readme.write_text(snapshot.with_block(text, BLOCK, body))
    png = snapshot.pareto_png(config["run"], Path(config["pareto_png"]))
    print(f"wrote the verdict block of {readme} and {png} from {config['run']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
