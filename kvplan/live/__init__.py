"""The live stack, measured: replay a spec's workload against it (bench), read its counters
(observe), fit the step-time model to it (calibrate) and put prediction and observation side by
side (compare)."""
