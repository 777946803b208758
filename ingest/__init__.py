"""Hook ingestion: the one application service every hook route and runtime adapter calls."""
