"""The discrete-event model of a tiered KV-cache deployment (see DESIGN.md, "The simulation model")."""
