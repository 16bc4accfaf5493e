"""`python -m linkd` runs the daemon (same as the `linkd` command)."""

from linkd.main import main

raise SystemExit(main())
