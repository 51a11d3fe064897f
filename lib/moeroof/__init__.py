"""moeroof: an analytical suite for MoE inference throughput when experts stream from slow storage."""


def __getattr__(name: str) -> str:
    """``moeroof.__version__``, looked up when first asked for: importlib.metadata costs ~25 ms,
    a sixth of a command's start-up, and most commands never print the version."""
    if name != "__version__":
        raise AttributeError(f"module 'moeroof' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("moeroof")
    except PackageNotFoundError:  # running from a source tree without installation
        value = "0.0.0+unknown"
    globals()["__version__"] = value
    return value
