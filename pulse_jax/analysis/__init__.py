"""Analysis of simulation results: every metric (`metrics`), the figures
(`plotting`) and the written reports (`report`)."""
