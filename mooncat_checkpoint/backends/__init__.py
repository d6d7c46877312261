"""Storage backends: ``file`` (default), ``sqlite`` and ``memory``; see ``base.Backend`` for the contract."""
