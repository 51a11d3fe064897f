"""moeroof: an analytical suite for MoE inference throughput when experts stream from slow storage."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("moeroof")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"
