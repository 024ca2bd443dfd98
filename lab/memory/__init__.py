"""Memory: peaks with their counter's scope, estimate vs observation, feasibility (SPEC 3.9)."""
