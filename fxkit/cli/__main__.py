"""``python -m fxkit.cli``: the ``fxkit`` command without the console script on PATH."""
import sys

from fxkit.cli.main import main

sys.exit(main())
