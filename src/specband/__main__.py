"""``python -m specband``: the same as the ``specband`` command."""

from specband.cli import main

if __name__ == "__main__":
    main()
