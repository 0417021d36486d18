"""What every measurement runs on, below the commands that run it: each workload's tasks and
worlds (BFCL categories, τ² domains), injected tool latency, the tools an agent is served, and the
ground truth replayed (conversations for mining drafters, traces for tuning)."""
