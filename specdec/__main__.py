"""`python -m specdec`: the `specdec` command line."""

import sys

from specdec.cli import main

if __name__ == "__main__":
    sys.exit(main())
