"""Benchmarks' data shapes: the prompts a benchmark makes, and the order in which it sends them.

inference-perf's `shared_prefix` data (workload kind `shared_prefix`) is a fixed set of prompts: `num_groups`
system prompts, each followed by `num_prompts_per_group` questions of its own, so that the prompts of a group
share their system prompt token for token. The set is made once, shuffled once, and sent over and over: request k
of a load stage sends prompt k mod (groups x prompts) of the shuffled order, with the prompt's own output length.

Read from kubernetes-sigs/inference-perf at commit e8e0aa99c57f2ffa0912df7ba1fbd2a8a596a041 (the version the BLIS
runs in models/profiles/e2e/blis/ used):

- inference_perf/datagen/shared_prefix_datagen.py, `SharedPrefixDataGenerator._generate_prompts`: for each group,
  `system_prompt_len` random token ids, then for each of its prompts `question_len` random token ids; the prompt is
  the system prompt's text, a space and the question's text; the list (group by group) is then shuffled with
  `random.shuffle`. `get_data` yields the prompts in that order, round and round; `get_request(n)` is prompt
  n mod len(prompts); every request asks for `output_len` tokens.
- inference_perf/loadgen/load_generator.py, `LoadGenerator.run_stage` (and `run` without workers): each load stage
  sends int(rate x duration) requests numbered from 0 (`get_request(request_number)`, or a fresh `get_data()`), so
  every stage starts again at the first prompt of the order.
- inference_perf/config.py, `SharedPrefix`: num_groups, num_prompts_per_group, system_prompt_len, question_len and
  output_len, whole numbers, nothing else.

The newest version read (commit 7de5ef2ed6f7934e0ecbc8297e593f79e68430c0, inference_perf/datagen/synthetic/
shared_prefix_datagen.py) keeps the shape and the order, and lets the three lengths be distributions: one system
prompt length per group, a question and an output length per prompt, drawn before the prompts are made and then
shuffled with them (a seeded `rng.permutation`). This generator does the same with kvplan's distributions
(kvplan.spec.workload.Dist); its `enable_multi_turn_chat` and `multimodal` options have no counterpart here and
`kvplan import --inference-perf` lists them as not imported.

The real prompts are random token ids that the tokenizer re-reads (4-5 % more tokens for Llama-2, measured in the
BLIS runs); kvplan's are the token runs named below, which kvplan bench sends as token ids (kvplan.live.tokens), so
the prompt lengths are exactly the configured ones.

Draws, all from one numpy Generator (PCG64(seed)), in this order: the system prompt lengths (one per group), the
question lengths (group by group, prompt by prompt), the output lengths (in the same order), then the order in
which the prompts are sent (a permutation of 0..groups x prompts - 1). Prompt i belongs to group
i // num_prompts_per_group. Its content is the runs (GROUP_PROMPT, group) and (QUESTION, i), then the request's own
output (OUTPUT, request id): two prompts of a group share exactly their system prompt, and a prompt sent again
repeats itself token for token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..spec.workload import draw
from .content import GROUP_PROMPT, OUTPUT, QUESTION, Segments

if TYPE_CHECKING:
    from ..spec.workload import SharedPrefixShape


class SharedPrefixSet:
    """The prompts of one shared_prefix workload and the order in which they are sent (the module docstring)."""

    def __init__(self, shape: SharedPrefixShape, rng: np.random.Generator):
        self.per_group = shape.num_prompts_per_group
        count = shape.num_groups * self.per_group
        self.system_lengths: np.ndarray = draw(shape.system_prompt_len, rng, shape.num_groups)
        """Tokens of each group's system prompt."""
        self.question_lengths: np.ndarray = draw(shape.question_len, rng, count)
        """Tokens of each prompt's question (prompt i is in group i // num_prompts_per_group)."""
        self.output_tokens: np.ndarray = draw(shape.output_len, rng, count)
        """Tokens generated for each prompt, every time it is sent."""
        self.order: np.ndarray = rng.permutation(count)
        """The prompts in the order they are sent: the k-th request of a load stage sends order[k mod len(self)]."""
        self.prompt_tokens: np.ndarray = self.system_lengths[np.arange(count) // self.per_group] + self.question_lengths
        """Tokens of each prompt: its group's system prompt and its question."""

    def __len__(self) -> int:
        return len(self.order)

    def sends(self, k: np.ndarray) -> np.ndarray:
        """The prompt the k-th request of a load stage sends, for each k (k counts from 0 in every stage)."""
        return self.order[k % len(self.order)]

    def content(self, prompt: int, request: int) -> Segments:
        """The tokens of request `request` sending prompt `prompt`: the system prompt, the question, then its output."""
        group = prompt // self.per_group
        return Segments((((GROUP_PROMPT, group), int(self.system_lengths[group])),
                         ((QUESTION, prompt), int(self.question_lengths[prompt])),
                         ((OUTPUT, request), int(self.output_tokens[prompt]))))
