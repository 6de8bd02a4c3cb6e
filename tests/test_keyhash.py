"""The block keys the installed simulator hashes in C (kvplan/sim/keyhash.c) are keyhash.py's, key for key.

keyhash.py is the definition: key i is hash((key i-1, pieces)) of Python tuples. The C twin computes
the same numbers with CPython's tuple and int hash arithmetic, without building the tuples. Every
cache hit, and every object's Ceph placement, follows from these keys, so they must be the same bits.
"""

from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES

import pytest
from hypothesis import given, settings, strategies as st

from conftest import source_module
from kvplan.sim import keyhash as installed
from kvplan.sim.content import OUTPUT_TAG, SEGMENTS_ROOT, TRACE_TAG

pytestmark = pytest.mark.compiled


source = source_module("kvplan/sim/keyhash.py", "keyhash_source")

identities = st.tuples(st.integers(1, 4), st.integers(0, 2**40))
parts_ = st.lists(st.tuples(identities, st.integers(1, 1200)), min_size=1, max_size=7).map(tuple)


def test_the_installed_keys_are_hashed_in_c():
    assert installed.__file__.endswith(tuple(EXTENSION_SUFFIXES)), installed.__file__


def chain(module, parts, n, unit, known, root):
    """`known` followed by the keys after it, up to the first n (extend_keys appends in place)."""
    keys = list(known)
    assert module.extend_keys(parts, n, unit, keys, root) is None
    return keys


@settings(max_examples=400, deadline=None)
@given(parts=parts_, unit=st.sampled_from([1, 7, 16, 256, 384, 1000]), data=st.data())
def test_c_and_python_give_the_same_keys_from_any_start(parts, unit, data):
    """Units inside one part and units across several (a short part, a part boundary), from the root
    or from keys already known (a turn continuing its conversation)."""
    n = sum(length for _, length in parts) // unit
    full = chain(source, parts, n, unit, [], SEGMENTS_ROOT)
    known = data.draw(st.integers(0, n))
    assert chain(installed, parts, n, unit, full[:known], SEGMENTS_ROOT) == full
    assert chain(installed, parts, known, unit, full, SEGMENTS_ROOT) == full    # enough known: nothing added


def test_the_keys_are_appended_to_the_list_given():
    """A turn takes over the keys of the finished turn it follows: the list itself grows, nothing is copied."""
    parts = (((3, 1), 40), ((4, 2), 9), ((3, 5), 30))
    for module in (source, installed):
        keys = chain(module, parts, 2, 16, [], SEGMENTS_ROOT)
        first = keys[:]
        module.extend_keys(parts, 4, 16, keys, SEGMENTS_ROOT)
        assert len(keys) == 4 and keys[:2] == first and keys == chain(source, parts, 4, 16, [], SEGMENTS_ROOT)
    with pytest.raises(TypeError, match="keys must be a list"):
        installed.extend_keys(parts, 4, 16, (), SEGMENTS_ROOT)


@pytest.mark.parametrize("prev", [0, -2, 1, 2**61 - 2, 2**61 - 1, 2**61, -(2**61) + 1, -(2**61), 2**63 - 1, -(2**63),
                                  SEGMENTS_ROOT])
def test_a_previous_key_anywhere_in_the_hash_range_chains_the_same(prev):
    """Python hashes an int modulo 2**61 - 1 and never to -1: the C side must, for every 64-bit key."""
    parts = (((3, 1), 40), ((4, 2), 9), ((3, 5), 30))
    assert chain(installed, parts, 4, 16, [prev], 0) == chain(source, parts, 4, 16, [prev], 0)
    assert chain(installed, parts, 3, 16, [], prev) == chain(source, parts, 3, 16, [], prev)


def test_asking_for_more_keys_than_the_content_holds_fails_the_same_way():
    parts = (((3, 1), 40),)
    for module in (source, installed):
        with pytest.raises(IndexError):
            module.extend_keys(parts, 3, 16, [], SEGMENTS_ROOT)


@settings(max_examples=400, deadline=None)
@given(ids=st.lists(st.integers(-2**70, 2**70), min_size=1, max_size=12), block=st.sampled_from([1, 16, 64, 512]),
       unit=st.sampled_from([1, 7, 16, 256, 512, 1000]), data=st.data())
def test_c_and_python_give_the_same_trace_keys(ids, block, unit, data):
    """A trace request's keys: its input's blocks named by hash ids of any size (CPython hashes each
    one), units smaller, larger or not dividing the trace's blocks, and the output's chained keys."""
    input_length = data.draw(st.integers(0, len(ids) * block))
    length = input_length + data.draw(st.integers(0, 3000))
    request = data.draw(st.integers(0, 2**40))
    args = (ids, input_length, length, unit, block, request, TRACE_TAG, OUTPUT_TAG)
    assert installed.trace_keys(*args) == source.trace_keys(*args)
