"""Framework-config readers behind :mod:`studies.config_import`: one module per framework."""
