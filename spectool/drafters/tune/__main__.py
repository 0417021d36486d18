"""``python -m spectool.drafters.tune``: the same command as ``spectool drafters tune``."""

from . import main

raise SystemExit(main())
