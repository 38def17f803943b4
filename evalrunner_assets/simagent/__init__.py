"""A simulated, seeded, tool-calling Inspect model provider for the bundled example agent."""
