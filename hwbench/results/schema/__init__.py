"""JSON Schemas of hwbench files."""
