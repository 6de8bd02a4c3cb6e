"""Property: any mutation of a valid spec is either valid or a SpecError, never another exception."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.spec import from_mapping

from conftest import REPO, example_data

EXAMPLES = ["chat-llama2-13b", "codegen-70b", "mooncake-replay", "local"]

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["64GiB", "1.5TB", "0", "-1GB", "50ms", "24h", "40/s", "25GB/s", "100Gbit", "1e400",
                     "nan", "LRU", "ARC", "lfu", "none", "mp", "inprocess", "H100-SXM", "gen5", "((", "1/0 s"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


def paths(node, prefix=()):
    """Every key path in a nested mapping (lists included by index)."""
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from paths(child, prefix + (key,))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from paths(child, prefix + (i,))


@st.composite
def mutated_specs(draw):
    data = copy.deepcopy(example_data(draw(st.sampled_from(EXAMPLES))))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(paths(data))[1:]))
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
    return data


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_specs())
def test_mutations_only_ever_raise_spec_errors(data):
    try:
        resolve(from_mapping(data, base_dir=REPO / "examples"))
    except SpecError as exc:
        assert exc.problems, "a SpecError always lists its problems"
        assert all(p.message for p in exc.problems)


plausible = st.sampled_from([0, 1, 2, 4, 8, 16, 32, 64, 256, 512, 4096, 0.5, 0.9, True, False, "LRU", "ARC", "LFU",
                              "none", "mp", "inprocess", "1GiB", "64GiB", "8GB", "1TB", "50ms", "1h", "2/s", "100/s",
                              "round_robin", "least_loaded", "session_affinity", "prefix_aware", "gamma", "poisson"])


@st.composite
def plausibly_changed_specs(draw):
    """One or two leaves of an example set to values a user might well write."""
    data = copy.deepcopy(example_data(draw(st.sampled_from(EXAMPLES))))
    leaves = [p for p in paths(data) if p and not isinstance(_at(data, p), (dict, list))]
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(leaves))
        _at(data, path[:-1])[path[-1]] = draw(plausible)
    return data


def _at(data, path):
    for part in path:
        data = data[part]
    return data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated_specs(), plausibly_changed_specs()))
def test_every_spec_that_validates_also_simulates(data):
    """Whatever a valid spec says, a short run of it completes, or the spec is refused: when it is validated,
    or, for what only a trace file's lines can say (validation checks its first line), when they are read."""
    from kvplan.sim.run import run

    workload = data.get("workload")
    if isinstance(workload, dict):      # keep each run short: a few requests, a minute at most
        workload["requests"] = 20
        workload["duration"] = "60s"
        if isinstance(workload.get("trace"), dict):
            workload["trace"]["limit"] = 20
    try:
        resolved = resolve(from_mapping(data, base_dir=REPO / "examples"))
    except SpecError:
        return
    try:
        result = run(resolved)
    except SpecError as refused:
        trace = resolved.workload.trace
        assert trace is not None and all(p.path.startswith(trace.path) for p in refused.problems), refused
        return
    assert result.requests + result.rejected_requests <= 20
    assert sum(t.served_tokens for t in result.tiers) + result.recomputed_tokens == result.prompt_tokens
