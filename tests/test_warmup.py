"""The warm-up prefills are one list: the simulator prefills, the deployment sends and kvplan bench re-sends the
same prompts, token for token (kvplan.warmup, which all three read)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO, spec
from kvplan import warmup as warm
from kvplan.deploy.stack import build
from kvplan.live.bench import Bench
from kvplan.live.tokens import prompt_tokens
from kvplan.resolve import resolve
from kvplan.sim import workload as wl


def deployed_prompts(r) -> list[dict]:
    """The warm-up play's prompts ({name, prompt: token ids}) as kvplan renders them."""
    stack = build(r, [f"gpu-{i}" for i in range(r.nodes)], ["ceph-1"])
    return stack.warmup.warmup_prompts if stack.warmup else []


def test_the_simulator_the_deployment_and_bench_warm_the_same_tokens():
    r = resolve(spec("chat-llama2-13b",
                     lmcache__warmup={"system_prompts": 2, "templates": [{"name": "faq", "tokens": 300}]}))
    simulated = wl.warmup(r)
    deployed = deployed_prompts(r)
    bench = Bench(r, [], salt=12345)
    assert [(p["name"], len(p["prompt"])) for p in deployed] == [("system prompt 0", simulated[0].prompt_tokens),
                                                                  ("system prompt 1", simulated[1].prompt_tokens),
                                                                  ("faq", 300)]
    for request, sent in zip(simulated, deployed, strict=True):
        assert bench.body(request, {})["prompt"] == sent["prompt"]


def test_a_bench_request_starts_with_the_tokens_the_deployment_warmed():
    """A request on the most popular system prompt begins with the warm-up's tokens whatever the run's salt, so
    it hits what the deploy prefilled; the text after it is the run's own."""
    r = resolve(spec("chat-llama2-13b"))
    first = deployed_prompts(r)[0]["prompt"]
    request = next(q for q in wl.requests(r) if q.content.parts[0][0] == (warm.SHARED_PREFIX, 0))
    vocab = r.model.vocab_size
    runs = [prompt_tokens(request.content, request.prompt_tokens, vocab, salt, warm=warm.warmed(r)) for salt in (1, 2)]
    assert runs[0][:len(first)] == runs[1][:len(first)] == first
    assert runs[0][len(first):] != runs[1][len(first):]


def test_rendering_loads_neither_the_simulator_nor_the_load_generator():
    """The deployment reads what it needs from Resolved and the spine (kvplan.warmup among it); kvplan observe
    reads the LMCache server's address from Resolved, not from the deployment."""
    code = ("import sys; from kvplan.resolve import resolve; from kvplan.spec import load; "
            "from kvplan.deploy.stack import build; r = resolve(load('examples/chat-llama2-13b.yaml')); "
            "build(r, [f'gpu-{i}' for i in range(r.nodes)], ['ceph-1']); "
            "print(sorted(m for m in sys.modules if m.startswith(('kvplan.sim', 'kvplan.live'))))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0 and eval(loaded.stdout) == [], loaded.stdout + loaded.stderr
    code = ("import sys, kvplan.live.observe, kvplan.live.bench; "
            "print(sorted(m for m in sys.modules if m.startswith('kvplan.deploy')))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0 and eval(loaded.stdout) == [], loaded.stdout + loaded.stderr
