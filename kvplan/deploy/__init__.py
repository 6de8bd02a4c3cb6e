"""Deployment: the second consumer of `Resolved`.

`stack` turns the resolved numbers into what each component is configured with (LMCache's config
or server flags, vLLM's arguments, the Ceph pool, options, bucket and lifecycle, Prometheus rules);
`render` writes them with the roles into an ansible-runner private_data_dir; `runner` applies
it with ansible-runner; `cephdiff` compares the desired Ceph state with a live cluster.
"""
