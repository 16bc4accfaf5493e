"""`python -m chaos.proxy`: one `FaultProxy` in its own process, commanded
over the control protocol (the command lives with it, in chaos/proxy_control.py)."""

from chaos.proxy_control import main

raise SystemExit(main())
