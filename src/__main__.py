import sys

from .cli.dispatch import main

sys.exit(main())
