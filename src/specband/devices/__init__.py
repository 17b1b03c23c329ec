"""specband.devices."""
