"""`spectool soak`: many agents on the embedded engine under faults, and its report."""
