"""`python -m mirror --config mm2.properties`."""

import sys

from mirror.cli import main

sys.exit(main())
