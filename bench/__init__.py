"""Benchmarks of SPEC §12 (`tachograph bench`) and standalone workloads."""
