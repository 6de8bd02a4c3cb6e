"""`kvplan import`: a spec from the configs a team already runs (a `vllm serve` command line, LMCache's config or
server command, production-stack Helm values), with every flag it could not map listed (kvplan.interop)."""

from __future__ import annotations

from typing import Optional

import typer

from ..errors import Problem, SpecError
from .common import STDOUT
from .console import err, fail as _fail, warn

def import_spec(vllm: Optional[str] = typer.Option(None, "--vllm", help="The `vllm serve MODEL --flag value ...` command "
                                                                        "line, quoted as one argument."),
               helm_values: Optional[str] = typer.Option(None, "--helm-values", help="vllm-project/production-stack Helm "
                                                                                     "values (instead of --vllm)."),
               model_spec: Optional[str] = typer.Option(None, "--model-spec", help="With --helm-values: the "
                                                                                   "modelSpec entry to import (default: "
                                                                                   "the first)."),
               gpu: str = typer.Option(..., "--gpu", help="The accelerator it runs on, by catalog name (the command "
                                                          "line does not say)."),
               lmcache: Optional[str] = typer.Option(None, "--lmcache", help="The LMCache engine config (YAML) that "
                                                                             "LMCACHE_CONFIG_FILE names (in-process)."),
               lmcache_server: Optional[str] = typer.Option(None, "--lmcache-server", help="The `lmcache server ...` "
                                                                                           "command line (MP mode)."),
               name: str = typer.Option("imported", "--name", help="The spec's name."),
               out_file: str = typer.Option("-", "-o", "--out", help="Write the spec here (default: stdout).")) -> None:
    """Make a spec from a vLLM command line (and LMCache's config or server command) or production-stack Helm values,
    listing every flag it could not map."""
    from pathlib import Path

    import yaml

    from ..interop import add_lmcache_config, add_lmcache_server, from_helm_values, from_vllm_command
    from ..resolve import resolve
    from ..spec import from_mapping, read_yaml

    if (vllm is None) == (helm_values is None):
        raise typer.BadParameter("give one of --vllm \"vllm serve ...\" and --helm-values FILE", param_hint="--vllm")
    try:
        if helm_values is not None:
            imported = from_helm_values(read_yaml(helm_values), gpu, model_spec)
        else:
            imported = from_vllm_command(vllm, gpu, name)
        if lmcache is not None:
            config = read_yaml(lmcache)
            if not isinstance(config, dict):
                raise SpecError([Problem("--lmcache", "an LMCache config is a YAML mapping", lmcache,
                                         fix="give the file LMCACHE_CONFIG_FILE names")])
            add_lmcache_config(imported, config, Path(lmcache).name)
        if lmcache_server is not None:
            add_lmcache_server(imported, lmcache_server)
    except SpecError as exc:
        _fail(exc)
    text = ("# made by kvplan import from " + ("production-stack Helm values" if helm_values else "a vLLM command line")
            + (" and an LMCache config" if lmcache else "") + (" and an LMCache server command" if lmcache_server else "")
            + "\n# workload: a placeholder; describe your traffic (docs/spec-reference.md, workload)\n"
            + yaml.safe_dump(imported.spec, sort_keys=False))
    if out_file == STDOUT:
        typer.echo(text, nl=False)
    else:
        Path(out_file).write_text(text)
        err.print(f"spec written to {out_file}")
    for what, why in imported.unmapped:
        warn(f"not imported: {what}: {why}")
    try:
        resolve(from_mapping(imported.spec, source=out_file))
    except SpecError as exc:
        err.print("the imported spec does not validate yet; fill in what the problems below name")
        _fail(exc)
