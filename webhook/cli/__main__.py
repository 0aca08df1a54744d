"""`python -m webhook.cli`: the `gpuclass` command (the tests and the benchmarks start the server so)."""

import sys

from . import main

sys.exit(main())
