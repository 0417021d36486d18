"""τ²-bench as a workload: its tasks, its train/test split and its own tools, read from the wheel."""
