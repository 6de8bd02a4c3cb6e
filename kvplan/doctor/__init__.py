"""`kvplan doctor`: the design note's troubleshooting chapter as a diagnosis, each fix proven by simulation.

A doctor looks at one spec and what it does: its simulated runs (kvplan.doctor.case) or a live stack's
counters (kvplan.doctor.live). Rules, each a small function of the case that knows nothing of printing,
turn symptoms into findings (kvplan.doctor.finding) with their evidence and candidate spec changes:
low hit ratio (hit_ratio), no room in GPU memory (memory), a long TTFT tail (tail), Ceph (ceph), and on
a live stack the components that are down. Every candidate change is then simulated on the same seeds
and kept only when it helps by more than the noise (kvplan.doctor.prove); `diagnose` returns the whole
`Diagnosis` (with the fixes for a missed SLO ranked by cost, kvplan.doctor.rank), and `written` what
`--write` writes: the fixes it proved, simulated as written.
"""

from .diagnose import diagnose, diagnose_live, fixed_mapping, simulated_case, written
from .finding import Change, Diagnosis, Finding, Fix, Proof

__all__ = ["Change", "Diagnosis", "Finding", "Fix", "Proof", "diagnose", "diagnose_live", "fixed_mapping", "simulated_case", "written"]
