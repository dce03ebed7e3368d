import sys

from relayrl.cli import main

sys.exit(main())
