"""``python -m bale``: the ``bale`` command (see ``bale._cli``)."""

import sys

from bale._cli import main

sys.exit(main())
