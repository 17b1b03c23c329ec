"""specband.evaluation."""
