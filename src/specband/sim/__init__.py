"""specband.sim."""
