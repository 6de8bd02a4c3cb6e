"""Next steps: what to run after a simulation whose answer is not yet a plan.

A run that misses its SLO, or that has a tier serving nothing, is where a planner starts, not
where they stop. The three commands that answer "what should change" are named with the spec:
`kvplan size` (how big each tier must be for this workload's reuse), `kvplan plan` (the
cheapest topology that meets the SLO at this rate; `kvplan capacity` for a trace, whose rate is its
own) and `simulate --ablate` (what each tier adds).
"""

from __future__ import annotations

from ..sim.result import SimResult
from ..units import fmt_duration


def cold_tiers(result: SimResult) -> list[str]:
    """A warning for every tier the run was too short to bring to steady state (kvplan.sim.steady)."""
    return [f"warning: {state.note}" for state in result.steady_state if not state.steady]


def next_steps(spec: str, result: SimResult, trace: bool = False, rated: bool = True, listed: bool = True) -> list[str]:
    """Lines to print after the tables; empty when the SLO is met and every tier serves something.
    A trace replays its own timestamps, so for one the planner's place is taken by `capacity` (the
    replay speed the topology sustains). A load of stages or a closed loop has no one rate for either to set
    (`rated` False), and `size` reads its requests only when they can be listed in advance (`listed`)."""
    missed = [c for c in result.slo if not c.met]
    idle = [t.name for t in result.tiers if t.name != "hbm" and t.served_tokens == 0]
    if not missed and not idle:
        return []
    why = []
    if missed:
        why.append("the SLO is missed (" + ", ".join(f"{c.key} {fmt_duration(c.value)} > {fmt_duration(c.target)}"
                                                     for c in missed) + ")")
    if idle:
        why.append(f"the {', '.join(idle)} tier{'s' if len(idle) > 1 else ''} served no prompt token")
    targets = " ".join(f"--slo {c.key}={fmt_duration(c.target).replace(' ', '')}" for c in result.slo)
    commands = [(f"kvplan size {spec}", "how big each tier must be for this workload's reuse")] if listed else []
    if trace:
        commands.append((f"kvplan capacity {spec}",
                         "the fastest replay of the trace this topology serves within the SLO"))
    elif rated:
        commands.append((f"kvplan plan {spec} --rate {result.requests_per_s:.3g}/s {targets}".rstrip(),
                         "the cheapest topology that meets the SLO at this rate"))
    commands.append((f"kvplan simulate {spec} --ablate --seeds 3", "what each tier adds, tested against the noise"))
    width = max(len(c) for c, _ in commands)
    return [f"next: {' and '.join(why)}; to see what would change that:"] + \
        [f"  {command:<{width}}  # {what}" for command, what in commands]
