"""``python -m dflashbench``: the same command line as the ``dflashbench`` console script."""

from dflashbench.cli import run

if __name__ == "__main__":
    run()
