"""A device profile: step-time coefficients fitted on one accelerator, as a file.

`kvplan calibrate -o` writes one (from kvplan bench runs or vllm bench serve results); a spec names
one as serving.step_profile (resolve puts its step_model between the catalog's defaults and the
spec's own serving.step_model), and `--profile` applies one to a spec from the command line.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import Problem, SpecError
from ..named_file import check_regular
from . import bounds
from .serving import StepModel
from .topology import Topology


class Profile(BaseModel):
    """A device profile: step-time coefficients measured on one accelerator (and model)."""

    model_config = ConfigDict(extra="forbid")
    device: str
    model: str
    step_model: StepModel
    fitted: list[str]
    """The coefficients the fit set (the others in step_model are the catalog's at fit time)."""
    fitted_on: list[dict]
    fit: dict[str, float]


def write_profile(profile: Profile, path: Path) -> None:
    s = profile.step_model.model_dump()
    step = {k: _ms(v) if k.endswith(("_overhead", "_latency")) else v for k, v in s.items() if v is not None}
    body = {"device": profile.device, "model": profile.model, "step_model": step,
            "fitted": profile.fitted, "fitted_on": profile.fitted_on, "fit": profile.fit}
    runs = ", ".join(run["name"] + (f" ({run['started_at']})" if run.get("started_at") else "") for run in profile.fitted_on)
    header = (f"# Device profile of {profile.device} serving {profile.model}, fitted by `kvplan calibrate` to "
              f"{runs}.\n# Name it in a spec as serving.step_profile: {path.name}, apply it with "
              f"`kvplan simulate|compare SPEC --profile {path.name}`, or copy step_model under the spec's serving:.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(body, sort_keys=False))


def _ms(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds * 1000:.4g}ms"


def read_profile(path: str | Path, where: str = "--profile") -> Profile:
    p = Path(path)
    check_regular(p, where, "give the file `kvplan calibrate -o` wrote")
    try:
        bounds.check_size(p.stat().st_size)
        return Profile.model_validate(bounds.load(p.read_text()))
    except SpecError as exc:
        raise SpecError([Problem(where, f"{p}: {q.message}", fix=q.fix) for q in exc.problems]) from None
    except FileNotFoundError:
        raise SpecError([Problem(where, f"no profile at {p}", fix="give the file `kvplan calibrate -o` wrote")]) from None
    except (ValidationError, yaml.YAMLError, OSError, TypeError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError([Problem(where, f"{p} is not a kvplan device profile: {first}",
                                 fix="give the file `kvplan calibrate -o` wrote")]) from None


def apply_profile(topo: Topology, profile: Profile, where: str = "--profile") -> Topology:
    """`topo` with the profile's step_model as serving.step_model; SpecError for another accelerator."""
    if profile.device != topo.serving.gpu:
        raise SpecError([Problem(where, f"the profile was fitted on {profile.device}; this spec runs on {topo.serving.gpu}",
                                 topo.serving.gpu, fix=f"calibrate on {topo.serving.gpu}, or drop --profile")])
    return topo.model_copy(update={"serving": topo.serving.model_copy(update={"step_model": profile.step_model})})
