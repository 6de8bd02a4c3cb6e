"""kvplan: plan, simulate and deploy tiered KV-cache LLM serving (vLLM + LMCache + Ceph)."""


def __getattr__(name: str) -> str:
    """`kvplan.__version__`, read from the installed package's metadata when first asked for:
    importlib.metadata would otherwise add about 30 ms to the start of every command."""
    if name != "__version__":
        raise AttributeError(f"module 'kvplan' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("kvplan")
    except PackageNotFoundError:  # running from a source tree that was never installed
        value = "0.0.0+source"
    globals()["__version__"] = value
    return value
