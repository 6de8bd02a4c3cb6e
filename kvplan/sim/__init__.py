"""The discrete-event model of a tiered KV-cache deployment (see DESIGN.md, "The simulation model").

Where the simulator is fast, it runs a fast form of something it could say more plainly. Each
fast form stands for a readable definition, and a test holds the two equal, bit for bit unless
the entry says otherwise. Tests give an engine an `engine.Probe` to run the engine's definitions
instead; a production engine has none.

- `Engine._schedule` visits only the requests still prefilling and the decoding ones at a block
  boundary. For: vLLM's loop over every running request, `Engine._schedule_each`
  (Probe(visit_each=True)). Held by tests/test_engine.py::
  test_visiting_only_what_changes_schedules_as_visiting_every_request.
- `decoding.DecodeSet` advances its members by one clock and keeps their block boundaries and
  ends in heaps. For: one token added to each decoding request every step. Held by
  tests/test_decoding.py::test_random_operations_match_counting_each_token.
- Decode fast-forward (`Engine._fast_forward`): many decode steps in one event. For: one step at
  a time (Probe(fast_forward=False)). Held by tests/test_engine.py::
  test_fast_forward_gives_the_same_latencies_as_stepping (latencies to 1e-9 relative, the same
  preemptions), and with vLLM's native offloading's loads landing between steps by
  tests/test_native_offload.py::test_the_fast_forms_give_the_same_results_with_native_offloading.
- `StepTime.decode_run`: a run's step end times in one loop. For: `StepTime.step` summed step by
  step. Held by tests/test_steptime.py::test_decode_run_equals_stepping_one_at_a_time (to 1e-12
  relative). A run timed as the engine reaches it (`StepTime.extend_run`, PLAN_FIRST steps, then
  as many again) for the run timed at once: tests/test_steptime.py::
  test_a_run_timed_in_pieces_is_the_run_timed_at_once_bit_for_bit.
- An engine without a prefix cache or LMCache hashes no block keys (`Engine.keyed`). For: the
  keys hashed anyway. Held by tests/test_engine.py::
  test_without_prefix_cache_or_lmcache_no_block_keys_are_hashed_and_nothing_changes.
- `prefix_cache.PrefixCache` keeps runs of blocks in a radix tree and finds where two chains part
  by a binary search (`_parting`). For: the per-block rules of its docstring (the test's
  BlockModel). Held by tests/test_prefix_cache.py::test_runs_behave_exactly_like_blocks.
- `Router._match` finds the routed prefix of a prompt by a binary search. For: walking its keys
  one by one. Held by tests/test_router.py::test_prefix_aware_counts_the_routed_prefix_of_a_prompt.
- `llmd.PrefixIndex` keeps, for each block hash, the instances whose LRU holds it. For: each
  instance's LRU asked for each block (llm-d's approx-prefix-cache-producer). Held by
  tests/test_llmd.py::test_the_index_by_holders_counts_as_walking_every_instances_lru.
- `links.Link` works out its completions lazily, by a virtual clock. For: processor sharing
  stepped from event to event with every transfer's remaining work. Held by tests/test_links.py::
  test_finish_times_match_a_step_by_step_processor_sharing_computation and
  test_on_a_saturated_link_every_waiter_wakes_exactly_when_its_last_part_is_served (to 1e-9
  relative).
- The eviction policies (policies.py). For: LRU, FIFO and MRU, a list in eviction order; ARC, the
  paper's pseudocode; LFU, a scan for the least frequently used. Held by tests/test_eviction.py::
  test_lru_and_fifo_match_a_list_reference_on_the_mooncake_trace,
  test_lru_fifo_mru_evict_exactly_what_a_list_model_says, test_arc_matches_the_paper_on_any_sequence,
  test_arc_matches_the_paper_on_the_mooncake_trace and
  test_lfu_matches_a_scanning_reference_on_the_mooncake_trace.
- `Cache.store` with insert written out (`LRU.store`, TTL's): a tier's store in one call. For:
  each key touched if present, inserted if not. Held by tests/test_eviction.py::
  test_store_is_touch_or_insert_key_by_key.
- A turn's keys taken over from the turn before it, and a shared prefix's keys hashed once per
  process (content.py). For: every key of the content hashed from the chain's root. Held by
  tests/test_workload.py::test_a_parent_only_speeds_things_up and
  test_sessions_that_open_with_the_same_shared_prefix_hash_its_keys_once.
- `workload.stream`, the requests drawn as a run reaches them. For: `workload.requests`, the
  built list. Held by tests/test_workload.py::
  test_the_stream_a_run_takes_is_the_list_and_says_its_counts_before_the_first_request.
- keyhash.c. For: keyhash.py. Held by tests/test_keyhash.py::
  test_c_and_python_give_the_same_keys_from_any_start and
  test_c_and_python_give_the_same_trace_keys.
- eventqueue.c. For: eventqueue.py, a heap of tuples. Held by tests/test_eventqueue.py::
  test_c_and_python_hand_out_the_same_events_in_the_same_order.
- clock.py, kvplan's own clock. For: SimPy 4.1's. Held by tests/test_clock.py::
  test_processes_and_events_run_in_simpys_order_exactly.
- The compiled core (the `compile` list of pyproject.toml, built with mypyc). For: the same
  modules interpreted. Held by tests/test_compiled.py::
  test_compiled_and_interpreted_modules_predict_the_same_bit_for_bit, over every example.
"""
