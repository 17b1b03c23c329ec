"""specband: pick sglang EAGLE3 speculative-decoding flags that keep GPU energy
utilisation (average power / power limit) inside a 95-98 % band while decoding fast.

Importing the package is cheap: heavy modules (torch, scikit-learn) load only when a
policy that needs them is used.
"""

from specband.core.errors import SpecbandError

__version__ = "0.1.0"

__all__ = ["SpecbandError", "__version__"]
