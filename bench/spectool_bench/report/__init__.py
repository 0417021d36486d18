"""Results files, tables and plots of the main job, and the timeline of one agent run."""
