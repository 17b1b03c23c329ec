"""specband.harness."""
