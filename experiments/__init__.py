"""`agora experiment NAME`: runs the real master against emulated agents and load frameworks,
and writes results.json, samples.csv, PNG plots and summary.md to --out DIR.

Each experiment module has a Config dataclass and `async run(config, out, command)`.
"""

EXPERIMENTS = ("offer-latency", "launch", "scale", "fairness")

__all__ = ["EXPERIMENTS"]
