"""An LLM's architecture: the handful of numbers that decide its KV-cache and weight footprint.

Catalog entries (models/llm/*.yaml) and inline `model:` blocks in a spec share this shape.
For MLA models (DeepSeek-V2/V3) vLLM caches one latent vector per token per layer, of width
kv_lora_rank + qk_rope_head_dim; it is written here as one KV "head" of that width.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import SpecModel
from .grammar import ModelId, Word


class Source(SpecModel):
    url: str = Field(min_length=1)
    """Where the number is published."""
    date: str = Field(pattern=r"^\d{4}-\d{2}(-\d{2})?$")
    """Publication or as-of date of that source (YYYY-MM or YYYY-MM-DD)."""
    covers: str = ""
    """Which fields this source supports."""


class Architecture(SpecModel):
    name: Word
    """Name users write in `model:` (one word: vLLM serves the model under it, --served-model-name)."""

    aliases: list[str] = []
    """Other names (Hugging Face repo ids) that mean this model."""

    attention: Literal["mha", "gqa", "mla"]
    """mha (one KV head per query head), gqa (grouped KV heads) or mla (latent KV, DeepSeek)."""

    num_layers: int = Field(ge=1)
    """Transformer layers."""

    hidden_size: int = Field(ge=1)
    """Model width."""

    num_attention_heads: int = Field(ge=1)
    """Query heads."""

    num_kv_heads: int = Field(ge=1)
    """KV heads (1 for MLA)."""

    head_dim: int = Field(ge=1)
    """Width of one KV head (for MLA: kv_lora_rank + qk_rope_head_dim)."""

    intermediate_size: int = Field(ge=1)
    """MLP width."""

    vocab_size: int = Field(ge=1)
    """Vocabulary size."""

    tie_word_embeddings: bool = False
    """The LM head shares the input embedding's matrix (Hugging Face config tie_word_embeddings)."""

    params: float = Field(gt=0)
    """Total parameters."""

    active_params: float | None = Field(None, gt=0)
    """Parameters active per token (mixture-of-experts models)."""

    max_context: int = Field(ge=1)
    """Longest context the model is served with by default (max_position_embeddings)."""

    kv_lora_rank: int | None = Field(None, ge=1)
    """MLA only: width of the compressed KV latent."""

    qk_rope_head_dim: int | None = Field(None, ge=1)
    """MLA only: width of the decoupled rotary key."""

    weights_dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    """Precision of the released weights (fp8: released quantised, as DeepSeek-V3; vLLM serves them as they are)."""

    hf_id: ModelId | None = None
    """Hugging Face repository vLLM serves by default (serving.model_path overrides it)."""

    sources: list[Source] = []
    """Where the numbers come from (required in the catalog)."""

    note: str | None = None
    """Remarks on the numbers."""

    @model_validator(mode="after")
    def _consistent(self) -> "Architecture":
        if self.attention == "mla":
            if self.kv_lora_rank is None or self.qk_rope_head_dim is None:
                raise ValueError("an mla model needs kv_lora_rank and qk_rope_head_dim")
            if self.num_kv_heads != 1 or self.head_dim != self.kv_lora_rank + self.qk_rope_head_dim:
                raise ValueError("an mla model caches one latent per token: num_kv_heads must be 1 and "
                                 f"head_dim kv_lora_rank + qk_rope_head_dim = {self.kv_lora_rank + self.qk_rope_head_dim}")
        elif self.attention == "mha" and self.num_kv_heads != self.num_attention_heads:
            raise ValueError(f"mha means num_kv_heads == num_attention_heads ({self.num_attention_heads}); use attention: gqa")
        elif self.num_attention_heads % self.num_kv_heads:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        return self

    @property
    def kv_per_layer(self) -> int:
        """Cached tensors per layer per token: 2 (K and V), or 1 latent for MLA."""
        return 1 if self.attention == "mla" else 2
