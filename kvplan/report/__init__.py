"""Renderers for simulation results: the same sections as terminal tables or Markdown."""
