"""python -m netspec.controller.cli"""

from .main import main

raise SystemExit(main())
