"""The vLLM plugin measured: its workload, overhead per arm, and n-gram speculation."""
