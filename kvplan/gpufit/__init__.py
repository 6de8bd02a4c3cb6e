"""The step-time model fitted to public GPU measurements.

kvplan's step-time model (`kvplan.sim.steptime`) has a handful of coefficients per accelerator.
This package fits them to measurements anyone can check, kept as data under `models/profiles/`:

- `operators`: per-layer operator timings of Llama-style models on A100 and H100 (microsoft/vidur's
  profiles) give the matrix-multiply efficiencies and the per-layer fixed cost;
- `collectives`: measured all-reduce times give the all-reduce bus efficiency;
- `benchmarks`: end-to-end vLLM serving benchmarks (public ones, or a team's own `vllm bench serve
  --save-result` files) give the per-step and per-request costs, and check the whole model;
- `report`: fits on part of each data set, reports the error on the part held back
  (docs/fidelity-gpu.md is generated from it);
- `calibrate`: the same end-to-end fit for a team's own `vllm bench serve` result files
  (`kvplan calibrate --vllm-result`).
"""
