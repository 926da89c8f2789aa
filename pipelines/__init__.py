"""Dagster partitions, jobs, sensors and schedules: WHEN and HOW the graph is rebuilt."""
