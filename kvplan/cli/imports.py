"""`kvplan import`: a spec from the configs a team already runs (a `vllm serve` command line, LMCache's config or
server command, production-stack Helm values, the benchmark it runs: an inference-perf config or a `vllm bench serve`
command line), with every flag it could not map listed (kvplan.interop)."""

from __future__ import annotations

from typing import Optional

import typer

from ..errors import SpecError
from .common import STDOUT
from . import files
from .console import err, fail as _fail, styled
from .files import OVERWRITE_HELP

def import_spec(vllm: Optional[str] = typer.Option(None, "--vllm", help="The `vllm serve MODEL --flag value ...` command "
                                                                        "line, quoted as one argument."),
               helm_values: Optional[str] = typer.Option(None, "--helm-values", help="vllm-project/production-stack Helm "
                                                                                     "values (instead of --vllm)."),
               model_spec: Optional[str] = typer.Option(None, "--model-spec", help="With --helm-values: the "
                                                                                   "modelSpec entry to import (default: "
                                                                                   "the first)."),
               gpu: Optional[str] = typer.Option(None, "--gpu", help="The accelerator it runs on, by catalog name (the "
                                                                     "command line does not say); needed for a spec."),
               lmcache: Optional[str] = typer.Option(None, "--lmcache", help="The LMCache engine config (YAML) that "
                                                                             "LMCACHE_CONFIG_FILE names (in-process)."),
               lmcache_server: Optional[str] = typer.Option(None, "--lmcache-server", help="The `lmcache server ...` "
                                                                                           "command line (MP mode)."),
               inference_perf: Optional[str] = typer.Option(None, "--inference-perf", help="An inference-perf config "
                                                                                           "(YAML): the workload."),
               vllm_bench: Optional[str] = typer.Option(None, "--vllm-bench", help="The `vllm bench serve ...` command "
                                                                                   "line, quoted as one argument: the "
                                                                                   "workload."),
               name: str = typer.Option("imported", "--name", help="The spec's name."),
               out_file: str = typer.Option("-", "-o", "--out", help="Write the spec here (default: stdout)."),
               overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP)) -> None:
    """Make a spec from a vLLM command line (and LMCache's config or server command) or production-stack Helm values,
    its workload from an inference-perf config or a vllm bench command, listing every flag it could not map. A
    benchmark alone gives a spec with --gpu (its model from the benchmark), else the workload section alone."""
    from pathlib import Path

    import yaml

    from ..interop import (add_lmcache_config, add_lmcache_server, check_workload, from_helm_values,
                           from_inference_perf, from_vllm_bench, from_vllm_command, spec_of)
    from ..resolve import resolve
    from ..spec import read_yaml
    from ..validation import from_mapping

    if vllm is not None and helm_values is not None:
        raise typer.BadParameter("give one of --vllm \"vllm serve ...\" and --helm-values FILE", param_hint="--vllm")
    if inference_perf is not None and vllm_bench is not None:
        raise typer.BadParameter("give one of --inference-perf FILE and --vllm-bench \"vllm bench serve ...\"",
                                 param_hint="--inference-perf")
    serving_given = vllm is not None or helm_values is not None
    if not serving_given and inference_perf is None and vllm_bench is None:
        raise typer.BadParameter("give --vllm \"vllm serve ...\" or --helm-values FILE (the serving), "
                                 "--inference-perf FILE or --vllm-bench \"vllm bench serve ...\" (the workload)",
                                 param_hint="--vllm")
    if serving_given and gpu is None:
        raise typer.BadParameter("name the accelerator the command runs on, e.g. --gpu H100-SXM", param_hint="--gpu")
    if not serving_given and (lmcache is not None or lmcache_server is not None):
        raise typer.BadParameter("LMCache's settings go with the serving: give --vllm or --helm-values too",
                                 param_hint="--lmcache")
    try:
        bench = None
        if inference_perf is not None:
            bench = from_inference_perf(read_yaml(inference_perf), Path(inference_perf).name)
        elif vllm_bench is not None:
            bench = from_vllm_bench(vllm_bench)
        imported = None
        if helm_values is not None:
            imported = from_helm_values(read_yaml(helm_values), gpu, model_spec)
        elif vllm is not None:
            imported = from_vllm_command(vllm, gpu, name)
        elif bench is not None and gpu is not None:
            imported = spec_of(bench, gpu, name)
        if lmcache is not None:
            add_lmcache_config(imported, read_yaml(lmcache), Path(lmcache).name)
        if lmcache_server is not None:
            add_lmcache_server(imported, lmcache_server)
    except SpecError as exc:
        _fail(exc)
    sources = [("production-stack Helm values" if helm_values else "a vLLM command line") if serving_given else None,
               "an LMCache config" if lmcache else None, "an LMCache server command" if lmcache_server else None,
               "an inference-perf config" if inference_perf else "a vllm bench command" if vllm_bench else None]
    head = "# made by kvplan import from " + " and ".join(s for s in sources if s) + "\n"
    if bench is None:
        head += "# workload: a placeholder; describe your traffic (docs/spec-reference.md, workload)\n"
    elif imported is not None:
        imported.spec["workload"] = bench.workload
    else:
        head += "# the workload section of a spec (give --gpu for a whole spec)\n"
    body = {"workload": bench.workload} if imported is None else imported.spec
    text = head + yaml.safe_dump(body, sort_keys=False)
    if out_file == STDOUT:
        typer.echo(text, nl=False)
    else:
        files.write(out_file, text, "-o/--out", overwrite)
        err.print(f"spec written to {out_file}")
    problem = None
    try:
        if imported is not None:
            resolve(from_mapping(imported.spec, source=out_file))
        else:
            check_workload(bench.workload, out_file)
    except SpecError as exc:
        problem = exc
    _left_over((imported.unmapped if imported is not None else []) + (bench.unmapped if bench else []),
               (imported.approximated if imported is not None else []) + (bench.approximated if bench else []))
    if problem is not None:
        err.print("the imported spec does not validate yet; fill in what the problems below name")
        _fail(problem)


def _left_over(unmapped: list[tuple[str, str]], approximated: list[tuple[str, str]]) -> None:
    """What the import could not carry, and what it carried with a difference, in one block after the spec (stderr),
    each with the reason: never dropped, never scattered."""
    for title, rows in (("not imported", unmapped), ("imported with a difference", approximated)):
        if rows:
            err.print(styled((f"{title} ({len(rows)}):", "bold yellow")))
            for what, why in rows:
                err.print(f"  {what}: {why}")

