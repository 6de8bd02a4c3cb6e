"""The planner: the cheapest topology that meets the SLO at a rate (`kvplan plan`).

space.py enumerates the candidates (hardware groups and spec variants), bounds.py prunes them
with floors that need no simulation (the workload measured once), and search.py simulates the
survivors, ranks them by cost and states the winner with its confidence.
"""
