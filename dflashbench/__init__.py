"""dflashbench: benchmark DFlash speculative decoding against AR and EAGLE-3."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dflashbench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
