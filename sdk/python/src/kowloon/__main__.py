"""`python -m kowloon` is the `kowloon` command."""
import sys

from .cli import main

sys.exit(main())
