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
