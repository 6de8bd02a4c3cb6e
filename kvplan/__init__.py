"""kvplan: plan, simulate and deploy tiered KV-cache LLM serving (vLLM + LMCache + Ceph)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kvplan")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
