"""Many simulations at once: sweeps over spec variants and the capacity search.

- `executor`: run (spec, seed) tasks in this process, on local worker processes or on Ray;
- `cache`: results on disk by (spec hash, seed), so nothing is simulated twice;
- `variants`: `--vary PATH=V1,V2,...` into full, validated specs;
- `sweep` and `result`: a sweep's points with mean and 95 % CI over seeds (JSON and CSV);
- `capacity`: the highest arrival rate that still meets an SLO, by bisection.
"""
