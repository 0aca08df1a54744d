"""`python -m bench`: run the benchmark suite (options: `python -m bench --help`)."""

import sys

from bench.run import main

sys.exit(main())
