"""The eight policies of the model card, one module each, with a common interface
(:mod:`specband.policies.base`)."""
