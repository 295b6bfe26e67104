"""`python -m mgpu_gui` starts the desktop app."""

import sys

from mgpu_gui.gui.app import main

sys.exit(main())
