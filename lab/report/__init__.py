"""Reports: raw table, summary statistics, decision note."""
