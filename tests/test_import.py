"""`kvplan import`: a spec from the vLLM command line (and LMCache config) a team already runs. It is the
deployment read backwards: what kvplan renders for a spec, imported again, gives the spec's settings back; and
every flag it cannot map is listed with the reason."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvplan.deploy.stack import _vllm, inprocess_config, server_args
from kvplan.deploy.vllm_command import vllm_args
from kvplan.interop import ENV_SET_BY_KVPLAN, add_lmcache_config, add_lmcache_server, from_vllm_command
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.spec import from_mapping, load

from conftest import REPO

KVPLAN = str(Path(sys.executable).parent / "kvplan")
def _deployable() -> dict[str, object]:
    """Every shipped example that kvplan deploys, and the flagship in LMCache's in-process mode (no example uses it)."""
    specs = {p.stem: load(p) for p in sorted((REPO / "examples").glob("*.yaml"))}
    flagship = specs["chat-llama2-13b"]
    specs["chat-llama2-13b-inprocess"] = flagship.model_copy(
        update={"lmcache": flagship.lmcache.model_copy(update={"mode": "inprocess"})})
    return {name: topo for name, topo in specs.items() if not topo.simulate_only}


SPECS = _deployable()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_importing_what_kvplan_deploys_gives_the_spec_back(name):
    r = resolve(SPECS[name])
    env = " ".join(f"{k}={v}" for k, v in _vllm(r).vllm_env.items())
    command = f"{env} vllm serve {r.model.aliases[0] if r.model.aliases else r.model.name} {shlex.join(vllm_args(r))}"
    imported = from_vllm_command(command, r.device.name)
    if r.lmcache is not None and r.lmcache.mode == "inprocess":
        add_lmcache_config(imported, inprocess_config(r), "lmcache.yaml")
    elif r.lmcache is not None:
        add_lmcache_server(imported, f"lmcache server {shlex.join(server_args(r))}")
    back = resolve(from_mapping(imported.spec))
    for field in ("tensor_parallel", "block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                  "kv_cache_dtype", "prefix_caching", "chunked_prefill", "quantization", "weights_dtype",
                  "kv_cache_memory_bytes"):
        assert getattr(back, field) == getattr(r, field), field
    if r.kv_cache_memory_bytes is None:
        assert back.gpu_memory_utilization == r.gpu_memory_utilization
    assert back.model.name == r.model.name and back.device.name == r.device.name
    assert (back.lmcache is None) == (r.lmcache is None)
    if r.lmcache is not None:
        assert (back.lmcache.mode, back.lmcache.port, back.lmcache.save_decode_cache) == \
               (r.lmcache.mode, r.lmcache.port, r.lmcache.save_decode_cache)
        assert back.lmcache.chunk_size == r.lmcache.chunk_size
        if True:
            for tier in ("ddr", "nvme"):
                mine, theirs = r.lmcache.tier(tier), back.lmcache.tier(tier)
                assert (theirs is None) == (mine is None), tier
                if mine is not None:
                    assert theirs.configured_gb == pytest.approx(mine.configured_gb) and theirs.eviction == mine.eviction
    # only what kvplan sets by itself, and the Ceph tier (a cluster, not a flag), is left over
    left = {what.split()[0].split("=")[0] for what, _ in imported.unmapped} - set(ENV_SET_BY_KVPLAN)
    assert left <= {"--served-model-name", "--enforce-eager", "--host", "--http-host", "--http-port", "--disable-metrics",
                    "--supported-transfer-mode", "--shm-name", "--l2-adapter", "lmcache.yaml:",
                    "--eviction-trigger-watermark", "--eviction-ratio"}, left
    if r.lmcache is not None and r.lmcache.mode == "mp":
        reasons = dict(imported.unmapped)
        assert reasons[f"--eviction-trigger-watermark {r.lmcache.eviction_watermark:g}"].endswith("to the same value")


def test_every_flag_without_a_kvplan_setting_is_listed_with_the_reason():
    imported = from_vllm_command("python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-7B-Instruct "
                                 "--swap-space 4 --trust-remote-code --pipeline-parallel-size=2 -q gptq "
                                 "--max-model-len 32k --kv-transfer-config '{\"kv_connector\": \"NixlConnector\"}'",
                                 "A100-80GB")
    serving = imported.spec["serving"]
    assert imported.spec["model"] == "Qwen2.5-7B" and serving["max_model_len"] == 32768
    assert serving["quantization"] == "gptq" and serving["weights_dtype"] == "int4"
    listed = dict(imported.unmapped)
    assert set(listed) == {"--swap-space 4", "--trust-remote-code", "--pipeline-parallel-size 2",
                           '--kv-transfer-config {"kv_connector": "NixlConnector"}'}
    assert "NixlConnector" in listed['--kv-transfer-config {"kv_connector": "NixlConnector"}']
    assert "lmcache" not in imported.spec


def test_a_server_that_evicts_at_another_watermark_is_listed_as_what_kvplan_cannot_set():
    """kvplan simulates and deploys LMCache's own batch eviction (80 %, 20 % at a time); a server started with
    another watermark is imported without it, and the reason says so."""
    imported = from_vllm_command("vllm serve meta-llama/Llama-3.1-8B", "H100-SXM")
    add_lmcache_server(imported, "lmcache server --l1-size-gb 64 --eviction-policy LRU "
                                 "--eviction-trigger-watermark 0.9 --eviction-ratio 0.2")
    reasons = dict(imported.unmapped)
    assert reasons["--eviction-trigger-watermark 0.9"] == ("kvplan simulates and deploys LMCache's default, "
                                                           "--eviction-trigger-watermark 0.8; it has no setting for "
                                                           "another value")
    assert reasons["--eviction-ratio 0.2"] == "kvplan's deployment sets it, to the same value"
    assert imported.spec["lmcache"]["ddr"] == {"eviction": "LRU", "size": "64GiB"}


def test_an_lmcache_config_becomes_the_tiers_per_node():
    """LMCache sizes are GiB per GPU: at TP 2, 5 of CPU memory per rank is a 10 GiB ddr tier."""
    imported = from_vllm_command("vllm serve meta-llama/Llama-3.1-8B -tp 2", "H100-SXM")
    add_lmcache_config(imported, {"chunk_size": 256, "local_cpu": True, "max_local_cpu_size": 5.0,
                                  "local_disk": "file:///mnt/nvme/lmcache/", "max_local_disk_size": 100,
                                  "cache_policy": "LFU", "remote_url": "s3://bucket", "blend_special_str": " # "},
                       "lmcache.yaml")
    lm = imported.spec["lmcache"]
    assert lm["mode"] == "inprocess" and lm["chunk_size"] == 256
    assert lm["ddr"] == {"size": "10GiB", "eviction": "LFU"}                  # LMCache's GB are GiB
    assert lm["nvme"] == {"size": "200GiB", "path": "/mnt/nvme/lmcache", "eviction": "LFU"}
    assert [what for what, _ in imported.unmapped] == ["lmcache.yaml: remote_url s3://bucket",
                                                       "lmcache.yaml: blend_special_str"]
    resolve(from_mapping(imported.spec))


def test_the_command_writes_a_spec_that_validates_and_names_what_it_left(tmp_path):
    """What the import could not carry is one block at the end, each flag with its reason, not warnings scattered
    among other output."""
    out = tmp_path / "spec.yaml"
    done = subprocess.run([KVPLAN, "import", "--vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 64 "
                           "--served-model-name chat --swap-space 4", "--gpu", "H100-SXM", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"spec written to {out}" and lines[1] == "not imported (2):"
    assert lines[2].startswith("  --served-model-name chat: kvplan serves the model under its catalog name")
    assert lines[3] == "  --swap-space 4: kvplan has no setting for it (it neither simulates nor deploys it)"
    assert len(lines) == 4 and "warning" not in done.stderr
    assert yaml.safe_load(out.read_text())["serving"]["max_num_seqs"] == 64
    assert subprocess.run([KVPLAN, "validate", str(out)], capture_output=True).returncode == 0


def test_what_was_not_carried_comes_after_the_spec_and_before_what_does_not_validate():
    """A spec that does not validate yet (a TP the model's heads do not divide) still lists what was left, in its
    block, and then the problem, last, with its exit code."""
    done = subprocess.run([KVPLAN, "import", "--vllm", "vllm serve meta-llama/Llama-3.1-8B --swap-space 4 -tp 3",
                           "--gpu", "H100-SXM"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    block = done.stderr.index("not imported (1):\n  --swap-space 4: ")
    assert block < done.stderr.index("the imported spec does not validate yet") < done.stderr.index("invalid:")


@pytest.mark.parametrize("gb, size", [(200, "200GiB"), (0.5, "512MiB"), (1.5, "1536MiB"), (0.1, "107374182B")])
def test_an_lmcache_size_is_written_in_the_largest_unit_that_holds_it_exactly(gb, size):
    """max_local_cpu_size: 200 (LMCache's GB are GiB) is 200GiB, not 214748364800B; a size no unit holds whole is
    written in bytes; each reads back to LMCache's bytes."""
    from kvplan.units import parse_size

    imported = from_vllm_command("vllm serve meta-llama/Llama-3.1-8B", "H100-SXM")
    add_lmcache_config(imported, {"max_local_cpu_size": gb}, "lmcache.yaml")
    assert imported.spec["lmcache"]["ddr"]["size"] == size
    assert parse_size(size) == round(gb * 2 ** 30)
    add_lmcache_server(imported := from_vllm_command("vllm serve meta-llama/Llama-3.1-8B", "H100-SXM"),
                       f"lmcache server --l1-size-gb {gb}")
    assert imported.spec["lmcache"]["ddr"]["size"] == size


def test_vllms_byte_sizes_are_written_in_the_largest_exact_unit_too():
    imported = from_vllm_command(f"vllm serve meta-llama/Llama-3.1-8B --kv-cache-memory-bytes {40 * 2**30} "
                                 "--kv-offloading-size 8", "H100-SXM")
    assert imported.spec["serving"]["kv_cache_memory"] == "40GiB"
    assert imported.spec["serving"]["kv_offloading"] == {"size": "8GiB"}


KEY = "sk-import-0123456789"


@pytest.mark.parametrize("command", [f"vllm serve meta-llama/Llama-3.1-8B --api-key {KEY}",
                                     f"vllm serve meta-llama/Llama-3.1-8B --api-key={KEY}",
                                     f"vllm serve meta-llama/Llama-3.1-8B --api-key {KEY} other-{KEY} --max-num-seqs 8",
                                     f"VLLM_API_KEY={KEY} vllm serve meta-llama/Llama-3.1-8B"])
def test_an_api_key_becomes_a_reference_to_where_the_deploy_reads_it_never_the_key(command, tmp_path):
    """A vLLM started with --api-key (or VLLM_API_KEY) asks every client for the key; the spec it is imported into
    deploys a vLLM that asks for it too (serving.api_key_env), and the key is nowhere: not in the spec, not in what
    the import lists, not in the command's output."""
    imported = from_vllm_command(command, "H100-SXM")
    assert imported.spec["serving"]["api_key_env"] == "VLLM_API_KEY"
    assert KEY not in yaml.safe_dump(imported.spec) + repr(imported.unmapped) + repr(imported.approximated)
    assert [what for what, _ in imported.approximated] in (["--api-key"], ["VLLM_API_KEY"])
    assert resolve(from_mapping(imported.spec)).api_key_env == "VLLM_API_KEY"
    out = tmp_path / "spec.yaml"
    done = subprocess.run([KVPLAN, "import", "--vllm", command, "--gpu", "H100-SXM", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert KEY not in done.stdout + done.stderr + out.read_text()
    assert "imported with a difference (1):" in done.stderr and "export VLLM_API_KEY=<the key>" in done.stderr


def test_helm_values_with_the_key_itself_are_imported_as_a_reference_only():
    from kvplan.interop import from_helm_values

    values = {"servingEngineSpec": {"vllmApiKey": KEY, "modelSpec": [{"name": "m", "modelURL": "meta-llama/Llama-3.1-8B"}]}}
    imported = from_helm_values(values, "H100-SXM")
    assert imported.spec["serving"]["api_key_env"] == "VLLM_API_KEY"
    assert KEY not in yaml.safe_dump(imported.spec) + repr(imported.unmapped) + repr(imported.approximated)


@pytest.mark.parametrize("command, says", [("vllm serve --max-num-seqs 8", "names no model"),
                                           ("vllm serve not-a/model", "the catalog has no model 'not-a/model'"),
                                           ("vllm serve 'unclosed", "cannot split the command line")])
def test_a_command_kvplan_cannot_read_is_an_error_with_a_fix(command, says):
    done = subprocess.run([KVPLAN, "import", "--vllm", command, "--gpu", "H100-SXM"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and says in done.stderr and "fix:" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("server, says", [
    ("lmcache server --port inf", "--port 'inf' is not a whole number from 1 to 65535"),
    ("lmcache server --port 70000", "--port '70000' is not a whole number from 1 to 65535"),
    ("lmcache server --chunk-size x", "--chunk-size 'x' is not a whole number"),
    ("lmcache server --chunk-size 1e400k", "--chunk-size '1e400k' is not a whole number"),
    ("lmcache server --l1-size-gb inf", "size 'inf' is not a number of GB"),
    ("lmcache server --l1-size-gb nan", "size 'nan' is not a number of GB"),
])
def test_a_server_flag_kvplan_cannot_read_is_refused_with_the_option_named(server, says):
    # issue 49: `--port inf` and `--chunk-size x` raised ValueError out of `kvplan import` (exit 70)
    imported = from_vllm_command("vllm serve meta-llama/Llama-3.1-8B", "H100-SXM")
    with pytest.raises(SpecError) as exc:
        add_lmcache_server(imported, server)
    [problem] = exc.value.problems
    assert problem.path == "--lmcache-server" and says in problem.message and problem.fix, problem


def test_an_lmcache_config_size_of_infinity_is_refused():
    imported = from_vllm_command("vllm serve meta-llama/Llama-3.1-8B", "H100-SXM")
    with pytest.raises(SpecError) as exc:
        add_lmcache_config(imported, {"max_local_cpu_size": float("inf")}, "lmcache.yaml")
    assert "is not a number of GB" in exc.value.problems[0].message


@pytest.mark.parametrize("text", ["chunk_size: !!int 0b102\n", "max_local_cpu_size: !!float 'x'\n"])
def test_a_malformed_yaml_tag_in_an_lmcache_config_is_an_error_naming_the_line(tmp_path, text):
    # issue 49: the tag's ValueError escaped `kvplan import --lmcache` as a traceback (exit 70)
    config = tmp_path / "lmcache.yaml"
    config.write_text("local_cpu: true\n" + text)
    done = subprocess.run([KVPLAN, "import", "--vllm", "vllm serve meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM",
                           "--lmcache", str(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "YAML error at line 2" in done.stderr and "cannot be read from" in done.stderr, done.stderr


@pytest.mark.parametrize("text", ["root:$6$s3cr3t-hash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n",
                                  "password: s3cr3t-hash\n", "s3cr3t-hash\n", "- s3cr3t-hash\n", ""])
def test_a_file_that_is_not_an_lmcache_config_is_refused_without_quoting_it(tmp_path, text):
    # issue 49: `kvplan import --lmcache /etc/shadow` printed the file's lines as "not imported: ..." warnings
    config = tmp_path / "shadow"
    config.write_text(text)
    done = subprocess.run([KVPLAN, "import", "--vllm", "vllm serve meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM",
                           "--lmcache", str(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "shadow is not an LMCache config" in done.stderr, done.stderr
    assert "s3cr3t" not in done.stdout + done.stderr


def test_an_lmcache_config_with_one_key_lmcache_reads_is_imported_and_its_other_keys_listed():
    imported = from_vllm_command("vllm serve meta-llama/Llama-3.1-8B", "H100-SXM")
    add_lmcache_config(imported, {"chunk_size": 256, "enable_blending": True, "my_own_key": 1}, "lmcache.yaml")
    assert imported.spec["lmcache"]["chunk_size"] == 256
    assert [where for where, _ in imported.unmapped] == ["lmcache.yaml: enable_blending", "lmcache.yaml: my_own_key"]


def test_a_mapping_of_no_lmcache_setting_is_refused_by_its_number_of_keys():
    imported = from_vllm_command("vllm serve meta-llama/Llama-3.1-8B", "H100-SXM")
    with pytest.raises(SpecError) as exc:
        add_lmcache_config(imported, {"user": "x", "token": "y"}, "secrets.yaml")
    [p] = exc.value.problems
    assert p.path == "--lmcache" and "none of its 2 top-level keys is a setting LMCache reads" in p.message
    assert "user" not in exc.value.render() and "token" not in exc.value.render()


def test_a_crash_report_of_an_import_redacts_the_key_inside_the_quoted_command_line():
    """The key given to vLLM travels inside --vllm's one argument; a crash report's argv must not keep it."""
    from kvplan.cli.crash import redact_argv

    argv = ["kvplan", "import", "--vllm", f"VLLM_API_KEY={KEY} vllm serve meta-llama/Llama-3.1-8B --api-key {KEY}2 "
            f"--api-key={KEY}3 --max-num-seqs 8", "--gpu", "H100-SXM"]
    shown, secrets = redact_argv(argv)
    assert KEY not in " ".join(shown) and {KEY, f"{KEY}2", f"{KEY}3"} <= set(secrets)
    assert shown[3] == "VLLM_API_KEY=<redacted> vllm serve meta-llama/Llama-3.1-8B --api-key <redacted> " \
                      "--api-key=<redacted> --max-num-seqs 8"
