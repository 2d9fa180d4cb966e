"""``python -m hfstage ...`` runs the staging worker (a zip of this package runs it the same way)."""

import sys

from hfstage.worker import main

sys.exit(main(sys.argv[1:]))
