"""Test setup: the tests import their builders as plain modules from this folder."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
