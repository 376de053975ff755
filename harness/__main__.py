"""`python -m harness`: the command line without the composition layer; the policy is the one the installed
distribution declares (harness.policy, entry-point group "specdec.policy"). `specdec` / `python -m specdec` is the
documented form."""

import sys

from harness.cli import main

sys.exit(main())
