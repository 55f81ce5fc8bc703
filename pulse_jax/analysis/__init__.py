"""Analysis of simulation results: every metric (`metrics`), the figures
(`plotting`) and the comparison table and results folder of a simulation (`results`)."""
