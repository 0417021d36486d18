"""BFCL as a workload: tasks and ground truth from the bfcl-eval wheel, its executable tool classes,
effects, splits."""
