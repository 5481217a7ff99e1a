import sys

from agora.cli.main import main

sys.exit(main())
