"""``python -m flops_fit``: the same as the ``flops-fit`` command."""

import sys

from flops_fit.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
