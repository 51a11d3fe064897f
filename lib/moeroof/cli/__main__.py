import sys

from moeroof.cli import main

sys.exit(main())
